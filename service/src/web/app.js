// What liveview does not do, from our own origin (the page's policy has
// no inline script and no eval): the page's title follows the shell's
// `data-title`; its address follows the shell's `data-route`, as entries
// of the browser's history (Back and a reload keep the place); a dropped
// socket shows a banner, says so when the page's server is gone, and
// reloads the page once the server answers again; a question arriving
// while the page is hidden raises a notification (when the person
// allowed them).
"use strict";
(function () {
  const NativeSocket = window.WebSocket;
  let retry = 500;
  function reloadWhenBack() {
    const offline = document.getElementById("offline");
    offline.hidden = false;
    // No answer: `web` ended (or this device lost the network), and a
    // new `web` has a new URL, so waiting here would wait forever. A
    // refusal: another `web` answers at this address, with another URL.
    const gone = () => {
      offline.textContent = "The page's server stopped. To go on, run " +
        "moonkale-service web again and open the new URL it prints.";
      later();
    };
    fetch("/app.css", { cache: "no-store" }).then(
      (r) => (r.ok ? location.reload() : gone()),
      gone
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
  let lastTerminal = null;
  function follow() {
    const shell = document.querySelector("[data-title]");
    if (!shell) return;
    const title = shell.getAttribute("data-title") || "";
    if (title !== lastTitle) {
      lastTitle = title;
      document.title = title;
    }
    followRoute(shell);
    // A terminal just shown takes the keys (a click on New terminal or on
    // one of the list, a reload at one).
    const terminal = shell.querySelector(".terminal-view");
    const shown = terminal && terminal.getAttribute("data-terminal");
    if (shown && shown !== lastTerminal) {
      const input = terminal.querySelector("input.keys");
      if (input) input.focus();
    }
    lastTerminal = shown;
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
  // The page's place: the shell names its view's address (`data-route`)
  // and whether the person opened it (`data-nav` "push": a new history
  // entry) or the page went there (a load, Back, a terminal that closed:
  // in place of the entry). Each entry's `depth` counts the page's own
  // entries before it. The shell hears the address (a hidden input's
  // value, as typed text is heard) once it renders, and after Back or
  // Forward; until then it names none, so a reload keeps its place.
  let lastRoute = "";
  let routeInput = null;
  const depth = () => (history.state && history.state.depth) || 0;
  function tellRoute() {
    routeInput.value = location.hash;
    routeInput.dispatchEvent(new Event("input", { bubbles: true }));
  }
  function followRoute(shell) {
    const input = shell.querySelector("input.route");
    if (input && input !== routeInput) {
      routeInput = input;
      tellRoute();
    }
    const route = shell.getAttribute("data-route") || "";
    if (route === "" || route === lastRoute) return;
    lastRoute = route;
    if (route === location.hash) return;
    if (shell.getAttribute("data-nav") === "push") {
      history.pushState({ depth: depth() + 1 }, "", route);
    } else {
      history.replaceState({ depth: depth() }, "", route);
    }
  }
  window.addEventListener("popstate", () => {
    if (routeInput) tellRoute();
  });
  // A back control is the browser's Back when the entry before is the
  // page's own (the list it came from); else the shell shows the list.
  document.addEventListener("click", (e) => {
    const back = e.target && e.target.closest && e.target.closest("button.back");
    if (back && depth() > 0) {
      e.stopPropagation();
      history.back();
    }
  }, true);
  let historyFromBottom = 0;
  document.addEventListener("scroll", (e) => {
    const t = e.target;
    if (t && t.classList && t.classList.contains("history")) {
      historyFromBottom = t.scrollHeight - t.scrollTop;
    }
  }, true);
  new MutationObserver(follow).observe(document.getElementById("main"), {
    subtree: true, childList: true, attributes: true,
    attributeFilter: ["data-title", "data-route", "data-nav", "data-terminal"],
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
