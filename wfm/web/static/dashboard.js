// The dashboard's only script: fills #content with the server's fragment, redraws it when the
// server's event stream says its data changed, and sends the page's forms. No library, no build.
"use strict";
(function () {
  const content = document.getElementById("content");
  const live = document.getElementById("live");
  let fragment = content.dataset.fragment;
  let pending = null;

  let asked = 0;  // responses may come back out of order: only the latest request's is shown

  async function refresh() {
    const mine = ++asked;
    try {
      const response = await fetch(fragment, {cache: "no-store"});
      const text = await response.text();
      if (mine !== asked) return;
      content.innerHTML = text;
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

  async function show(what, url) {
    const detail = document.getElementById("detail");
    detail.textContent = "asking " + what + " ...";
    const response = await fetch(url, {cache: "no-store"});
    detail.innerHTML = await response.text();
    detail.scrollIntoView({block: "nearest"});
  }

  async function act(what, body) {
    const result = document.getElementById("action-result");
    result.textContent = what + " " + body.gid + " ...";
    result.className = "";
    const response = await fetch("/api/" + what, {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    const answer = await response.json();
    result.textContent = answer.error ? answer.error
      : what === "rerun" ? "rerunning " + answer.rerun_of + " as " + answer.gid : "cancelled " + answer.gid;
    result.className = answer.error ? "problem" : "ok";
  }

  content.addEventListener("click", (event) => {
    const broker = event.target.closest("[data-broker]");
    const run = event.target.closest("section.generation");
    if (broker) {
      event.preventDefault();
      show(broker.dataset.broker, "/fragment/broker/" + encodeURIComponent(broker.dataset.broker));
    } else if (run) {
      const body = {workflow: run.dataset.workflow, gid: run.dataset.gid};
      const action = event.target.closest("[data-action]");
      const job = event.target.closest("[data-job]");
      if (action && action.dataset.action === "rerun") {
        act("rerun", {...body, from: run.querySelector("[data-rerun-from]").value});
      } else if (action) {
        act(action.dataset.action, body);
      } else if (job) {
        show("the log of " + job.dataset.job,
             "/fragment/logs?" + new URLSearchParams({...body, job: job.dataset.job}));
      }
    }
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
