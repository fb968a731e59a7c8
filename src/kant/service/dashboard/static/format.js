// The rules the dashboard and the HTML reports (kant simulate, kant compare) share, as one classic
// script (the dashboard loads it before app.js; the reports inline it): durations as the CLI writes
// them, readings of the service clock, percentages, the colour-blind-safe palette. window.kantFormat.
(() => {
  const pad2 = (n) => String(n).padStart(2, "0");
  // a duration: the CLI's rule (kant.text.format_duration, its "compact" style): 45s, 3m20s, 2h05m, 3d04h;
  // the same cases are checked against both (tests/data/durations.json)
  function dur(seconds) {
    if (seconds == null || !isFinite(seconds)) return "n/a";
    let s = Math.round(seconds);
    if (Math.abs(seconds % 1) === 0.5 && s % 2 !== 0) s -= 1;  // (half to even, as Python's round)
    s = Math.max(0, s);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${pad2(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h${pad2(Math.floor((s % 3600) / 60))}m`;
    return `${Math.floor(s / 86400)}d${pad2(Math.floor((s % 86400) / 3600))}h`;
  }
  // a reading of the service clock: a date on a wall clock (this browser's time zone), "day 27 17:11" on a
  // replay (accelerated or manual: days and time of day of the service's seconds)
  function clockText(t, kind) {
    if (t == null || !isFinite(t)) return "n/a";
    if (kind === "wall") {
      const d = new Date(t * 1000);
      return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    }
    const s = Math.max(0, Math.floor(t));
    return `day ${Math.floor(s / 86400)} ${pad2(Math.floor((s % 86400) / 3600))}:${pad2(Math.floor((s % 3600) / 60))}`;
  }
  const pct = (x) => (x == null ? "n/a" : `${(100 * x).toFixed(1)}%`);
  // tenants on the map, policies in the reports: kant.metrics.palette.PALETTE (colour-blind-safe colours of
  // Okabe and Ito and of Paul Tol, each next the farthest by CIEDE2000 from those before it: the first n
  // given to n tenants are far apart for any n; tests/test_palette.py checks this copy is the same)
  const PALETTE = ["#0072B2", "#BBCC33", "#EE6677", "#117733", "#882255", "#66CCEE", "#D55E00", "#44BB99",
    "#332288", "#E69F00", "#EE8866", "#AA4499", "#CC79A7", "#999933", "#77AADD", "#DDCC77"];
  // round steps for a time axis (s): ticks fall on whole seconds, minutes, hours, days
  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800, 1209600, 2592000];
  window.kantFormat = { dur, clockText, pct, PALETTE, TIME_INCRS };
})();
