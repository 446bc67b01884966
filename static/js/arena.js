// An arena battle: one message box, two models. The page holds one chat socket per side (htmx's ws
// extension, `.arena-socket`); a message goes to both, and each side's answer streams into its pane.
// Until the vote, one message only: the vote is on the first answers. Enter sends, Shift+Enter
// makes a new line; sending waits while an answer streams. The button comes disabled and is enabled
// once both sockets are open: a message typed before that is not lost, the page says to wait.
(function () {
  "use strict";

  var sockets = {};

  document.addEventListener("htmx:wsOpen", function (event) {
    var host = event.target.closest && event.target.closest(".arena-socket");
    if (host) sockets[host.dataset.conversation] = { wrapper: event.detail.socketWrapper, elt: host };
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
    button.disabled = streaming() || waitingForVote() || Object.keys(sockets).length < 2;
  }

  function say(text) {
    var box = document.getElementById("arena-prompt-error");
    if (!box) return;
    box.textContent = text;
    box.hidden = !text;
  }

  function send(form) {
    var box = form.querySelector("#prompt");
    var text = box.value;
    if (!text.trim()) return;
    var sides = Object.keys(sockets);
    if (sides.length < 2) { say("The battle is still connecting: try again in a moment."); return; }
    if (streaming() || waitingForVote()) return;
    say("");
    sides.forEach(function (pk) {
      sockets[pk].wrapper.send(JSON.stringify({ prompt: text }), sockets[pk].elt);
    });
    form.reset();
    sync();
  }

  document.addEventListener("htmx:wsOpen", function () {
    if (Object.keys(sockets).length >= 2) say("");
  });

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
    if (!form.querySelector("button[type=submit]").disabled) send(form);
    else if (Object.keys(sockets).length < 2) say("The battle is still connecting: try again in a moment.");
  });

  document.addEventListener("DOMContentLoaded", function () {
    var arena = document.getElementById("arena");
    if (!arena) return;
    new MutationObserver(sync).observe(document.body, { childList: true, subtree: true, attributes: true,
                                                        attributeFilter: ["data-status"] });
    document.addEventListener("htmx:wsOpen", sync);
    sync();
  });
})();
