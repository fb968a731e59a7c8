"""Built-in policy plugins, one module each; importing this package registers them all by NAME."""

import importlib
import pkgutil

__all__: list[str] = []

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_mod}")
    __all__.append(_mod)
