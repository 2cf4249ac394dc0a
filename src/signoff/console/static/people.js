/* The people page: "Copy the link" copies the set-password link (and says so). */
(function () {
  "use strict";
  Array.prototype.forEach.call(document.querySelectorAll("[data-copy]"), function (button) {
    button.addEventListener("click", function () {
      var field = document.getElementById(button.getAttribute("data-copy"));
      var status = document.getElementById("copy-status");
      if (!field) return;
      function say(text) { if (status) status.textContent = text; }
      function fallback() {
        field.focus();
        field.select();
        var copied = false;
        try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
        say(copied ? "Copied the link." : "The link is selected: press Ctrl+C (or ⌘+C) to copy it.");
      }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(function () { say("Copied the link."); }, fallback);
      } else {
        fallback();
      }
    });
  });
})();
