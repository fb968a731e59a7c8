"""Built-in policy plugins, one module each. Each registers its plugins by NAME when imported;
:mod:`kant.framework.registry` imports the module of a name a policy asks for, or all of them to
list every name."""
