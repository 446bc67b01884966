// The questionnaire by keyboard: on a question (any of its five choices focused), the keys 1 to 5
// answer it; Tab moves to the next question, as for any group of radio buttons. A prefilled answer
// (the user's last one) is a checked choice like any other: keep it, or press another number.
(function () {
  "use strict";

  document.addEventListener("keydown", function (event) {
    var input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "radio") return;
    var question = input.closest("fieldset.likert");
    if (!question || event.altKey || event.ctrlKey || event.metaKey) return;
    if (!/^[1-5]$/.test(event.key)) return;
    var choice = question.querySelector('input[type=radio][value="' + event.key + '"]');
    if (!choice) return;
    event.preventDefault();
    choice.checked = true;
    choice.focus();
    question.classList.remove("prefilled");
    choice.dispatchEvent(new Event("change", { bubbles: true }));
  });

  // A changed prefilled answer is the user's own now.
  document.addEventListener("change", function (event) {
    var question = event.target instanceof Element && event.target.closest("fieldset.likert.prefilled");
    if (question) question.classList.remove("prefilled");
  });
})();
