// The board's extra columns: the ones a visitor ticks under "More columns" show, and stay shown on
// their next visit (localStorage). Loaded in <head>, so the remembered columns are set before the
// table is drawn; without this script the chooser stays hidden and every column shows.
(function () {
  "use strict";
  var KEY = "board-columns";
  var root = document.documentElement;
  function stored() {
    try {
      var list = JSON.parse(window.localStorage.getItem(KEY) || "[]");
      return Array.isArray(list) ? list.filter(function (c) { return /^[a-z-]+$/.test(c); }) : [];
    } catch (e) {
      return [];
    }
  }
  function save(list) {
    try { window.localStorage.setItem(KEY, JSON.stringify(list)); } catch (e) { /* private mode: not kept */ }
  }
  root.classList.add("board-columns");
  stored().forEach(function (c) { root.classList.add("show-" + c); });

  // After a load or an htmx swap (a sort, another context): show the chooser, ticked as remembered.
  function sync() {
    var shown = stored();
    document.querySelectorAll("details.columns").forEach(function (d) {
      d.hidden = false;
      d.querySelectorAll("input[name=board-column]").forEach(function (box) {
        box.checked = shown.indexOf(box.value) >= 0;
      });
    });
  }
  // On a narrow screen the table scrolls in its frame: bring the column it is sorted by into view (the
  // model's column stays, sticky), so that a click on "Weighted" shows the order it gave.
  function showSorted() {
    document.querySelectorAll("#board-table .table-frame").forEach(function (frame) {
      var th = frame.querySelector("th[aria-sort=ascending], th[aria-sort=descending]");
      if (!th || frame.scrollWidth <= frame.clientWidth) return;
      var f = frame.getBoundingClientRect(), t = th.getBoundingClientRect();
      if (t.right > f.right) frame.scrollLeft += t.right - f.right + 8;
    });
  }
  document.addEventListener("DOMContentLoaded", function () { sync(); showSorted(); });
  document.addEventListener("htmx:afterSettle", function () { sync(); showSorted(); });
  document.addEventListener("change", function (e) {
    var box = e.target;
    if (!box.matches || !box.matches("details.columns input[name=board-column]")) return;
    var shown = stored().filter(function (c) { return c !== box.value; });
    if (box.checked) shown.push(box.value);
    root.classList.toggle("show-" + box.value, box.checked);
    save(shown);
  });
})();
