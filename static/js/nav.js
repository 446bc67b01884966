// The site menu on a narrow screen: collapsed behind a Menu button (shown only when this script
// runs; without it the menu stays open and wraps). Escape closes it and gives focus back to the button.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.querySelector(".menu-toggle");
    var nav = document.getElementById("site-nav");
    if (!button || !nav) return;
    document.documentElement.classList.add("js-menu");
    button.hidden = false;
    function set(open) {
      button.setAttribute("aria-expanded", open ? "true" : "false");
      nav.classList.toggle("open", open);
    }
    button.addEventListener("click", function () { set(button.getAttribute("aria-expanded") !== "true"); });
    nav.addEventListener("keydown", function (e) {
      if (e.key === "Escape") { set(false); button.focus(); }
    });
  });
})();
