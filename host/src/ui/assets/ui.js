// metaclaw's dashboard works without this; it only adds conveniences.
"use strict";
// Local times as the browser's own clock sees them, for times it renders
// itself (none yet need more than the server's rendering).
document.addEventListener("DOMContentLoaded", () => {
  // Forms that change something ask first (they carry data-confirm).
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
