// What liveview does not do, from our own origin (the page's policy has
// no inline script and no eval): the page's title follows the shell's
// `data-title`; a dropped socket shows a banner and reloads the page once
// the server answers again; a question arriving while the page is hidden
// raises a notification (when the person allowed them).
"use strict";
(function () {
  const NativeSocket = window.WebSocket;
  let retry = 500;
  function reloadWhenBack() {
    document.getElementById("offline").hidden = false;
    fetch("/app.css", { cache: "no-store" }).then(
      (r) => (r.ok ? location.reload() : later()),
      later
    );
  }
  function later() {
    retry = Math.min(retry * 2, 10000);
    setTimeout(reloadWhenBack, retry);
  }
  window.WebSocket = function (url, protocols) {
    const ws = new NativeSocket(url, protocols);
    ws.addEventListener("close", () => setTimeout(reloadWhenBack, retry));
    return ws;
  };
  window.WebSocket.prototype = NativeSocket.prototype;
  Object.assign(window.WebSocket, NativeSocket);

  // Only the page's own part is watched (not <head>, which the title
  // changes), and only a changed value is acted on.
  let lastTitle = "";
  let lastCount = 0;
  let lastHistory = null;
  function follow() {
    const shell = document.querySelector("[data-title]");
    if (!shell) return;
    const title = shell.getAttribute("data-title") || "";
    if (title !== lastTitle) {
      lastTitle = title;
      document.title = title;
    }
    const count = document.querySelectorAll("article.card.question").length;
    if (count > lastCount && document.hidden && "Notification" in window &&
        Notification.permission === "granted") {
      new Notification("Claude asks for you", { body: title });
    }
    lastCount = count;
    // Earlier lines open at their newest, next to the screen, and keep
    // their place from the bottom when more arrive on top (the rows are
    // re-used in order, so the browser's own scroll anchoring cannot).
    const history = document.querySelector(".terminal.history");
    if (history && history !== lastHistory) {
      history.scrollTop = history.scrollHeight;
      historyFromBottom = history.clientHeight;
    } else if (history) {
      history.scrollTop = history.scrollHeight - historyFromBottom;
    }
    lastHistory = history;
  }
  let historyFromBottom = 0;
  document.addEventListener("scroll", (e) => {
    const t = e.target;
    if (t && t.classList && t.classList.contains("history")) {
      historyFromBottom = t.scrollHeight - t.scrollTop;
    }
  }, true);
  new MutationObserver(follow).observe(document.getElementById("main"), {
    subtree: true, childList: true, attributes: true, attributeFilter: ["data-title"],
  });
  // The terminal's input is not controlled by the server: a line entered
  // there is emptied here (the shell forgets what it sent on Enter too).
  // Tab goes to the terminal (liveview cannot keep it from moving the
  // focus).
  // A prompt is sent by Enter (Shift+Enter is a new line) or Send, and
  // its box emptied here: the shell does not control the textarea.
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (!(t && t.classList)) return;
    if (t.classList.contains("keys")) {
      if (e.key === "Enter") t.value = "";
      if (e.key === "Tab") e.preventDefault();
    } else if (t.closest && t.closest(".prompt-box") && e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      if (t.value.trim() !== "") t.value = "";
    }
  });
  document.addEventListener("click", (e) => {
    const send = e.target && e.target.closest && e.target.closest(".prompt-box .send");
    const box = send && send.parentElement.querySelector("textarea");
    if (box && box.value.trim() !== "") box.value = "";
  });
  // A click on the terminal's screen gives its input the keys.
  document.addEventListener("click", (e) => {
    const screen = e.target && e.target.closest && e.target.closest(".terminal");
    const input = screen && screen.parentElement.querySelector("input.keys");
    if (input) input.focus();
  });
  document.addEventListener("click", (e) => {
    if (e.target && e.target.id === "notify" && "Notification" in window) {
      Notification.requestPermission();
    }
  });
})();
