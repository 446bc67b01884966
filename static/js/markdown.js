// Model output rendered as Markdown (lib/markdown.py): a code block's Copy button copies its code.
// Loaded by every page that renders it: the chat, the evidence page, the expert queue.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    var button = e.target.closest("button.copy-code");
    if (!button) return;
    var code = button.closest(".code-block").querySelector("pre.code").innerText;
    var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(code).then(done, function () { button.textContent = "Copy failed"; });
    } else {  // plain http on a LAN address: the clipboard API is not offered, the old way still works
      var area = document.createElement("textarea");
      area.value = code;
      area.setAttribute("readonly", "");
      area.style.position = "fixed"; area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      var ok = document.execCommand("copy");
      area.remove();
      if (ok) done(); else button.textContent = "Copy failed";
    }
  });
})();
