// The chat page's keyboard and flow: Enter sends, Shift+Enter makes a new line; while an answer
// streams, sending is disabled (the socket refuses a second message anyway, never queues it).
// (A code block's Copy button is markdown.js's, on every page that renders model output.)
(function () {
  "use strict";

  function streaming() {
    return document.querySelector('#messages .turn[data-status="streaming"]') !== null;
  }

  // Every way of asking (the prompt, a replay question, regenerate, edit) waits for the answer.
  function syncSending() {
    var busy = streaming();
    document.querySelectorAll(
      '#prompt-form button[type=submit], #replay-questions button, .turn-actions button, form.retry button'
    ).forEach(function (b) { b.disabled = busy; });
    // Only the last turn can be asked again (the socket refuses the others).
    var all = document.querySelectorAll("#messages .turn");
    all.forEach(function (t, k) { t.classList.toggle("latest", k === all.length - 1); });
    var chat = document.getElementById("chat");
    if (chat) chat.dataset.streaming = busy ? "yes" : "no";
  }

  document.addEventListener("keydown", function (e) {
    var box = e.target;
    if (e.key !== "Enter" || e.shiftKey || e.isComposing || !box.matches("#prompt, .edit-prompt textarea")) return;
    e.preventDefault();
    var form = box.form, send = form.querySelector("button[type=submit]");
    if (send && !send.disabled && box.value.trim()) form.requestSubmit(send);
  });

  // Once a message is on its way, its form is emptied (an edit form also closes).
  document.addEventListener("htmx:wsAfterSend", function (e) {
    var form = e.target.closest && e.target.closest("#prompt-form, form.edit-prompt");
    if (!form) return;
    form.reset();
    var details = form.closest("details");
    if (details) details.open = false;
  });

  // The first message names the conversation: its heading comes from the socket, and the tab's
  // title and the rename box follow it.
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    if (e.detail.target.id !== "conversation-heading") return;
    var title = document.getElementById("conversation-heading").textContent;
    document.title = title + " · LLMChain";
    var box = document.getElementById("conversation-title");
    if (box && document.activeElement !== box) box.value = box.defaultValue = title;
  });

  document.addEventListener("DOMContentLoaded", function () {
    var messages = document.getElementById("messages");
    if (!messages) return;
    new MutationObserver(syncSending).observe(document.getElementById("chat"), {childList: true, subtree: true, attributes: true, attributeFilter: ["data-status"]});
    syncSending();
  });
})();
