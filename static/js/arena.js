// An arena battle: one message box, two models. The page holds one chat socket per side (htmx's ws
// extension, `.arena-socket`); a message goes to both, and each side's answer streams into its pane.
// Until the vote, one message only: the vote is on the first answers. Enter sends, Shift+Enter
// makes a new line; sending waits while an answer streams. The button comes disabled and is enabled
// once both sockets are open: a message typed before that is not lost, the page says to wait.
(function () {
  "use strict";

  var sockets = {};

  function connected() {
    return Object.keys(sockets).length >= 2;
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    var host = event.target.closest && event.target.closest(".arena-socket");
    if (!host) return;
    sockets[host.dataset.conversation] = { wrapper: event.detail.socketWrapper, elt: host };
    if (connected()) say("");  // a "still connecting" said earlier no longer holds
    sync();
  });

  function streaming() {
    return document.querySelector('#arena .turn[data-status="streaming"]') !== null;
  }

  function waitingForVote() {
    var box = document.getElementById("arena-vote-box");
    var voted = box && ["answering"].indexOf(box.dataset.status) < 0;
    return !voted && document.querySelector("#arena .turn") !== null;
  }

  function sync() {
    var form = document.getElementById("arena-prompt");
    if (!form) return;
    var button = form.querySelector("button[type=submit]");
    button.disabled = streaming() || waitingForVote() || !connected();
  }

  function say(text) {
    var box = document.getElementById("arena-prompt-error");
    if (!box) return;
    box.textContent = text;
    box.hidden = !text;
  }

  // Every way of sending (the button, Enter) comes here; it sends nothing while the button would be disabled.
  function send(form) {
    if (!connected()) { say("The battle is still connecting: try again in a moment."); return; }
    var text = form.querySelector("#prompt").value;
    if (!text.trim() || streaming() || waitingForVote()) return;
    say("");
    Object.keys(sockets).forEach(function (pk) {
      sockets[pk].wrapper.send(JSON.stringify({ prompt: text }), sockets[pk].elt);
    });
    form.reset();
    sync();
  }

  document.addEventListener("submit", function (event) {
    if (event.target.id !== "arena-prompt") return;
    event.preventDefault();
    send(event.target);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing || event.target.id !== "prompt") return;
    var form = event.target.form;
    if (!form || form.id !== "arena-prompt") return;
    event.preventDefault();
    send(form);
  });

  document.addEventListener("DOMContentLoaded", function () {
    var arena = document.getElementById("arena");
    if (!arena) return;
    new MutationObserver(sync).observe(document.body, { childList: true, subtree: true, attributes: true,
                                                        attributeFilter: ["data-status"] });
    sync();
  });
})();
