"""The report page's inline stylesheet and script (no network at view time: nothing is fetched)."""
from __future__ import annotations

CSS = """
:root { --fg:#1d2330; --muted:#5b6578; --line:#dde2ea; --accent:#1f77b4; --tc:#1f77b4; --cuda:#d62728;
        --mem:#7f7f7f; --bg:#ffffff; --soft:#f5f7fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; padding: 24px 32px 64px; max-width: 1500px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 34px 0 10px;
    border-bottom: 1px solid var(--line);
     padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 6px; }
p.doc { margin: 2px 0 8px; font-size: 15px; } p.source, p.muted, .muted { color: var(--muted); }
.chips { display: flex; flex-wrap: wrap; gap: 6px; margin: 10px 0; }
.chip { background: var(--soft); border: 1px solid var(--line); border-radius: 12px; padding: 1px 10px;
    font-size: 13px; }
.chip b { font-weight: 600; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; min-width: 150px;
    background: var(--soft); }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; max-width: 100%; }
table.tree { font-size: 13px; }
table.tree, table.data, table.forms { width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 4px; text-align: right; white-space: nowrap;
    vertical-align: middle; }
th { background: var(--soft); position: sticky; top: 0; font-weight: 600; font-size: 13px; z-index: 1; }
td.name, th.name { text-align: left; } td.formula { text-align: left; white-space: normal; }
table.data td, table.data th, table.forms th { text-align: left; }
caption { text-align: left; font-weight: 600; padding: 6px 0; }
tr.total td { font-weight: 600; border-top: 2px solid var(--fg); }
tr.badrow td { background: #fdecea; }
button.tog { border: none; background: none; cursor: pointer; width: 1.4em; padding: 0; color: var(--muted);
    font-size: 12px; }
span.leaf { display: inline-block; width: 1.4em; }
.bar { display: inline-block; width: 32px; height: 9px; background: #edf0f5; border-radius: 2px;
    vertical-align: middle; margin-right: 4px; overflow: hidden; }
.bar span { display: block; height: 100%; background: var(--accent); }
.bar.time span { background: #ff7f0e; }
.bound-TC { color: var(--tc); } .bound-CUDA { color: var(--cuda); } .bound-memory { color: var(--mem); }
.controls { margin: 6px 0; } .controls button { font: inherit; font-size: 12px; margin-right: 6px; }
math { font-size: 15px; } td.formula math { font-size: 14px; } mtable.lines mtd { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; }
svg.chart { background: #fff; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; height: auto; }
svg .grid { stroke: #e7eaf0; } svg .frame { fill: none; stroke: #8a93a3; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg .title { font-size: 13px; font-weight: 600; }
svg .label { font-size: 12px; } svg .pointlabel { font-size: 10.5px; fill: #222; } svg .rooflabel { font-size: 11px; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0; }
dl.kv dt { color: var(--muted); } dl.kv dd { margin: 0; }
.ok { color: #1a7f37; font-weight: 600; } .bad { color: #c62828; font-weight: 600; } .none { color: var(--muted); }
ul.notes li { margin: 3px 0; color: var(--muted); }
#js-errors { color: #c62828; white-space: pre-wrap; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
/* Every width: the page never scrolls sideways; a table wider than the page scrolls inside its .scroll box,
   charts scale down (viewBox, max-width), long words in text break. */
p, li, dd, dt, .chip, caption, footer { overflow-wrap: anywhere; }
table.symbols td:last-child { white-space: normal; min-width: 14em; }
table.memory td.formula { min-width: 18em; overflow-wrap: anywhere; }
@media (max-width: 1400px) { body { padding: 20px 20px 56px; } }
@media (max-width: 700px) {
  body { padding: 14px 12px 40px; } h1 { font-size: 22px; } h2 { font-size: 17px; }
  .card { min-width: 0; flex: 1 1 130px; padding: 6px 10px; } .card .v { font-size: 17px; }
  .charts { gap: 10px; } math { font-size: 14px; }
}
"""

# Errors are written into the page (#js-errors) so a headless browser's DOM dump shows them.
JS = """
(function () {
  var errors = document.getElementById('js-errors');
  window.addEventListener('error', function (e) { errors.textContent += 'JS error: ' + e.message + '\\n'; });
  function refresh(body) {
    var cut = Infinity;
    for (var i = 0; i < body.rows.length; i++) {
      var r = body.rows[i], d = +r.dataset.depth;
      if (isNaN(d)) continue;
      if (d <= cut) cut = Infinity;
      r.hidden = d > cut;
      if (!r.hidden && r.classList.contains('collapsed')) cut = d;
    }
  }
  function setAll(body, collapsed, below) {
    for (var i = 0; i < body.rows.length; i++) {
      var r = body.rows[i];
      if (r.querySelector('button.tog')) {
        var c = collapsed && +r.dataset.depth >= below;
        r.classList.toggle('collapsed', c);
        r.querySelector('button.tog').textContent = c ? '\\u25B6' : '\\u25BC';
      }
    }
    refresh(body);
  }
  document.querySelectorAll('table.tree, table.forms').forEach(function (table) {
    var body = table.tBodies[0];
    body.addEventListener('click', function (e) {
      var b = e.target.closest('button.tog');
      if (!b) return;
      var row = b.closest('tr');
      row.classList.toggle('collapsed');
      b.textContent = row.classList.contains('collapsed') ? '\\u25B6' : '\\u25BC';
      refresh(body);
    });
    var bar = table.parentElement.previousElementSibling;
    if (bar && bar.classList.contains('controls')) {
      bar.querySelector('.expand').addEventListener('click', function () { setAll(body, false, 0); });
      bar.querySelector('.collapse').addEventListener('click', function () { setAll(body, true, 0); });
    }
    setAll(body, true, +table.dataset.open);
  });
  document.body.dataset.ready = '1';
})();
"""
