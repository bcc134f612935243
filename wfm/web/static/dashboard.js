// The dashboard's only script: fills #content with the server's fragment, redraws it when the
// server's event stream says its data changed, and sends the page's forms. No library, no build.
"use strict";
(function () {
  const content = document.getElementById("content");
  const live = document.getElementById("live");
  let fragment = content.dataset.fragment;
  let pending = null;

  async function refresh() {
    try {
      const response = await fetch(fragment, {cache: "no-store"});
      content.innerHTML = await response.text();
    } catch (error) {
      live.textContent = "server unreachable";
      return;
    }
    clearTimeout(pending);
    if (content.querySelector("[data-pending]")) pending = setTimeout(refresh, 2000);
  }

  const events = new EventSource("/events");
  events.onopen = () => { live.textContent = "live"; live.className = "on"; };
  events.onerror = () => { live.textContent = "reconnecting ..."; live.className = "off"; };
  if (content.dataset.events) events.addEventListener(content.dataset.events, refresh);

  content.addEventListener("click", async (event) => {
    const broker = event.target.closest("[data-broker]");
    if (!broker) return;
    event.preventDefault();
    const detail = document.getElementById("detail");
    detail.textContent = "asking " + broker.dataset.broker + " ...";
    const response = await fetch("/fragment/broker/" + encodeURIComponent(broker.dataset.broker));
    detail.innerHTML = await response.text();
  });

  const trigger = document.getElementById("trigger-form");
  if (trigger) trigger.addEventListener("submit", async (event) => {
    event.preventDefault();
    const result = document.getElementById("trigger-result");
    const workflow = document.getElementById("trigger-workflow").value;
    result.textContent = "triggering " + workflow + " ...";
    const response = await fetch("/api/trigger", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({workflow}),
    });
    const answer = await response.json();
    result.textContent = answer.error ? answer.error : "started " + answer.workflow + " " + answer.gid;
    result.className = answer.error ? "problem" : "ok";
  });

  const history = document.getElementById("history-form");
  if (history) history.addEventListener("submit", (event) => {
    event.preventDefault();
    fragment = content.dataset.fragment + "?" + new URLSearchParams(new FormData(history));
    content.textContent = "loading ...";
    refresh();
  });

  refresh();
})();
