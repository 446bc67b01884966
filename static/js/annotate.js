// Keyboard shortcuts on the expert queue: 1, 2, 0 give that verdict, s skips.
// Never while the expert is typing (the note, the filters) or holding a modifier key.
// The page asks for the item to be held for the expert as soon as it shows it (#hold, an htmx
// POST); a key pressed before that answer is in is kept and acted on once it is, so that a verdict
// or a skip never overtakes the hold (nor cuts its request short by leaving the page).
(function () {
  "use strict";
  var busy = false;
  var asked = false;  // the hold's request has been answered (or failed)
  var pending = null;  // the button of a key pressed while it was on its way

  function press(button) {
    busy = true;  // one keypress, one submission
    button.form.requestSubmit ? button.form.requestSubmit(button) : button.click();
  }

  document.addEventListener("htmx:afterRequest", function () {
    asked = true;
    if (pending) {
      var button = pending;
      pending = null;
      press(button);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (busy || pending || event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    var key = event.key === "S" ? "s" : event.key;
    if (["1", "2", "0", "s"].indexOf(key) < 0) return;
    var button = document.querySelector('#item button[data-key="' + key + '"]');
    if (!button) return;
    event.preventDefault();
    if (!asked && window.htmx && document.querySelector("#hold[hx-post]")) {
      pending = button;
      return;
    }
    press(button);
  });
})();
