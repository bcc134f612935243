// The dashboard's only script: fills #content with the server's fragment, redraws it when the
// server's event stream says its data changed, and sends the page's forms. No library, no build.
"use strict";
(function () {
  const content = document.getElementById("content");
  const live = document.getElementById("live");
  let fragment = content.dataset.fragment;
  let pending = null;

  let asked = 0;  // responses may come back out of order: only the latest request's is shown

  // wfm up (or wfm web) started again has a new token: this tab's cookie is refused from then on,
  // and the page says so instead of showing a refusal's JSON or reconnecting for ever
  function signedOut() {
    events.close();
    live.textContent = "signed out";
    live.className = "off";
    content.innerHTML = "";
    const note = document.createElement("p");
    note.className = "problem";
    note.id = "signed-out";
    note.textContent = "This page's token is no longer valid: wfm up (or wfm web) was started "
      + "again and printed a new URL. Open that URL.";
    content.append(note);
  }

  async function refresh() {
    const mine = ++asked;
    try {
      const response = await fetch(fragment, {cache: "no-store"});
      if (response.status === 401) return signedOut();
      const text = await response.text();
      if (mine !== asked) return;
      content.innerHTML = text;
    } catch (error) {
      live.textContent = "server unreachable";
      return;
    }
    clearTimeout(pending);
    if (content.querySelector("[data-pending]")) pending = setTimeout(refresh, 2000);
    markOpen();
  }

  // the Runs page: the generation opened from the grid, redrawn with it
  const runPanel = document.getElementById("run");
  let runUrl = null, open = null, askedRun = 0;

  async function refreshRun() {
    if (!runUrl) return;
    const mine = ++askedRun;
    try {
      const response = await fetch(runUrl, {cache: "no-store"});
      if (response.status === 401) return signedOut();
      const text = await response.text();
      if (mine === askedRun) redraw(runPanel, text);
    } catch (error) {
      live.textContent = "server unreachable";
    }
  }

  // what the operator chose or is typing in the open generation (a scope, a comment) outlives
  // its redraws, which come with every change of its jobs
  const KEPT = ["[data-approval-comment]", "[data-hold-scope]", "[data-rerun-from]"];
  function redraw(panel, html) {
    const kept = KEPT.map((selector) => panel.querySelector(selector))
      .map((field) => field && {value: field.value, focused: field === document.activeElement});
    panel.innerHTML = html;
    KEPT.forEach((selector, i) => {
      const field = panel.querySelector(selector);
      if (!field || !kept[i]) return;
      field.value = kept[i].value;
      if (kept[i].focused) field.focus();
    });
  }

  function markOpen() {
    for (const row of content.querySelectorAll("tr.run")) {
      row.classList.toggle("open", !!open && row.dataset.workflow === open.workflow
                                    && row.dataset.gid === open.gid);
    }
  }

  function openRun(row) {
    open = {workflow: row.dataset.workflow, gid: row.dataset.gid};
    runUrl = "/fragment/run?" + new URLSearchParams(open);
    runPanel.textContent = "loading " + open.gid + " ...";
    markOpen();
    refreshRun().then(() => runPanel.scrollIntoView({block: "nearest"}));
  }

  function filtered(form, extra) {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
    for (const [name, value] of Object.entries(extra || {})) params.set(name, value);
    return content.dataset.fragment + (params.size ? "?" + params : "");
  }

  // ?static=1: drawn once, no event stream (a stream never ends, so a headless browser's
  // --virtual-time-budget would wait for ever: the screenshot recipe of docs/web.md)
  const still = new URLSearchParams(location.search).has("static");
  const events = still ? {close() {}} : new EventSource("/events");
  if (still) {
    live.textContent = "not live (static)";
  } else {
    events.onopen = () => { live.textContent = "live"; live.className = "on"; };
    events.onerror = () => {  // refused or unreachable: an EventSource does not say which
      live.textContent = "reconnecting ..."; live.className = "off"; refresh();
    };
    if (content.dataset.events) events.addEventListener(content.dataset.events, () => {
      refresh();
      if (runPanel) refreshRun();
    });
  }

  async function show(what, url) {
    const detail = document.getElementById("detail");
    detail.textContent = "asking " + what + " ...";
    const response = await fetch(url, {cache: "no-store"});
    if (response.status === 401) return signedOut();
    detail.innerHTML = await response.text();
    detail.scrollIntoView({block: "nearest"});
  }

  async function act(what, body) {
    const result = document.getElementById("action-result");
    result.textContent = what + " " + (body.gid || body.job || body.workflow) + " ...";
    result.className = "";
    const response = await fetch("/api/" + what, {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    const answer = await response.json();
    result.textContent = answer.error ? answer.error : said(what, answer);
    result.className = answer.error ? "problem" : "ok";
  }

  // what an action's answer says: hold and release, what each agent answered (what is still held)
  function said(what, answer) {
    if (what === "rerun") return "rerunning " + answer.rerun_of + " as " + answer.gid;
    if (what === "approve") return answer.detail;
    if (what === "hold" || what === "release") {
      return Object.entries(answer.agents).map(([agent, ack]) => agent + ": " + ack.detail).join("; ");
    }
    return "cancelled " + answer.gid;
  }

  const filter = document.getElementById("runs-filter");
  if (filter) filter.addEventListener("submit", (event) => {
    event.preventDefault();
    fragment = filtered(filter);
    refresh();
  });

  document.querySelector("main").addEventListener("keydown", (event) => {
    const row = event.target.closest("tr.run");
    if (row && event.key === "Enter") openRun(row);
  });

  document.querySelector("main").addEventListener("click", async (event) => {
    const ack = event.target.closest("[data-ack]");
    if (ack) {
      const result = document.getElementById("action-result");
      result.textContent = "acknowledging " + ack.dataset.ack + " ...";
      const response = await fetch("/api/alerts/ack", {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({id: ack.dataset.ack}),
      });
      const answer = await response.json();
      result.textContent = answer.error ? answer.error : "acknowledged " + answer.id;
      result.className = answer.error ? "problem" : "ok";
      return;
    }
    const broker = event.target.closest("[data-broker]");
    const run = event.target.closest("section.generation");
    const row = event.target.closest("tr.run");
    const paging = event.target.closest("[data-page-to]");
    if (paging && filter) {
      fragment = filtered(filter, {page: paging.dataset.pageTo});
      refresh();
    } else if (row) {
      openRun(row);
    } else if (broker) {
      event.preventDefault();
      show(broker.dataset.broker, "/fragment/broker/" + encodeURIComponent(broker.dataset.broker));
    } else if (run) {
      const body = {workflow: run.dataset.workflow, gid: run.dataset.gid};
      const action = event.target.closest("[data-action]");
      const job = event.target.closest("[data-job]");
      if (action && action.dataset.action === "rerun") {
        act("rerun", {...body, from: run.querySelector("[data-rerun-from]").value});
      } else if (action && action.dataset.approvalJob) {
        const comment = run.querySelector("[data-approval-comment]").value;
        act("approve", {...body, job: action.dataset.approvalJob, verdict: action.dataset.action, comment});
      } else if (action && (action.dataset.action === "hold" || action.dataset.action === "release")) {
        // the scope: "" this generation, a job in every generation, "*" every job of the workflow
        const scope = run.querySelector("[data-hold-scope]").value;
        act(action.dataset.action, scope === "" ? body
          : {workflow: body.workflow, ...(scope === "*" ? {} : {job: scope})});
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

  // a running job's elapsed time, counted on every second between two redraws (svg.elapsed)
  function elapsed(seconds) {
    const whole = Math.max(Math.floor(seconds), 0);
    const two = (n) => String(n).padStart(2, "0");
    if (whole < 60) return whole + " s";
    if (whole < 3600) return Math.floor(whole / 60) + " min " + two(whole % 60) + " s";
    return Math.floor(whole / 3600) + " h " + two(Math.floor(whole / 60) % 60) + " min";
  }
  setInterval(() => {
    const now = Date.now() / 1000;
    for (const text of document.querySelectorAll("[data-since]")) {
      text.textContent = "running " + elapsed(now - Number(text.dataset.since)) + text.dataset.rest;
    }
  }, 1000);

  refresh();
})();
