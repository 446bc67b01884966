// Keyboard shortcuts on the expert queue: 1, 2, 0 give that verdict, s skips.
// Never while the expert is typing (the note, the filters) or holding a modifier key.
(function () {
  "use strict";
  var busy = false;
  document.addEventListener("keydown", function (event) {
    if (busy || event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    var key = event.key === "S" ? "s" : event.key;
    if (["1", "2", "0", "s"].indexOf(key) < 0) return;
    var button = document.querySelector('#item button[data-key="' + key + '"]');
    if (!button) return;
    event.preventDefault();
    busy = true;  // one keypress, one submission
    button.form.requestSubmit ? button.form.requestSubmit(button) : button.click();
  });
})();
