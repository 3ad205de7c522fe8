/* The header badge (every admin page) and the dashboard's live feed (admin home), over one WebSocket.
   Event data is hostile text: it is only ever written with textContent. */
(function () {
  "use strict";
  var badge = document.getElementById("goclaw-approvals-badge");
  if (!badge) { return; }
  var countEl = document.getElementById("goclaw-approvals-count");
  var tileEl = document.getElementById("goclaw-approvals-waiting");
  var feedBody = document.getElementById("goclaw-feed-body");
  var feedStatus = document.getElementById("goclaw-feed-status");
  var FEED_MAX = 50;
  var timer = null;

  function show(n) {
    countEl.textContent = String(n);
    badge.dataset.count = String(n);
    badge.classList.toggle("goclaw-badge-zero", n === 0);
    if (tileEl) { tileEl.textContent = String(n); }
    var base = document.title.replace(/^\(\d+\) /, "");
    document.title = n > 0 ? "(" + n + ") " + base : base;
  }
  // Events say that something changed, not the new count: re-read it (a burst of events costs one request).
  function refresh() {
    if (timer) { return; }
    timer = setTimeout(function () {
      timer = null;
      fetch(badge.dataset.countUrl, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) { if (d && typeof d.approvals_waiting === "number") { show(d.approvals_waiting); } })
        .catch(function () {});
    }, 200);
  }
  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (cls) { td.className = cls; }
    row.appendChild(td);
  }
  function feed(kind, m) {
    if (!feedBody) { return; }
    var p = m.payload || {};
    var row = document.createElement("tr");
    row.className = "goclaw-feed-new";
    row.dataset.kind = kind;
    var when = m.ts ? new Date(m.ts) : new Date();
    cell(row, when.toISOString().slice(11, 19));
    cell(row, kind === "call" ? "call" : m.type);
    cell(row, p.agent);
    cell(row, p.tool);
    cell(row, p.status, "goclaw-status goclaw-status-" + String(p.status || "").replace(/[^a-z_]/g, ""));
    cell(row, typeof p.duration_ms === "number" ? p.duration_ms.toFixed(1) + " ms" : "");
    feedBody.insertBefore(row, feedBody.firstChild);
    while (feedBody.rows.length > FEED_MAX) { feedBody.deleteRow(feedBody.rows.length - 1); }
    var empty = document.getElementById("goclaw-feed-empty");
    if (empty) { empty.hidden = true; }
  }
  function state(text) {
    if (feedStatus) { feedStatus.textContent = text; }
  }
  function connect() {
    var ws = new WebSocket(badge.dataset.wsUrl);
    ws.onopen = function () {
      ws.send(JSON.stringify({action: "subscribe", group: "approvals"}));
      if (feedBody) { ws.send(JSON.stringify({action: "subscribe", group: "invocations"})); }
    };
    ws.onmessage = function (e) {
      var m;
      try { m = JSON.parse(e.data); } catch (err) { return; }
      if (m.type === "subscribed" && m.group === "approvals") {
        badge.dataset.live = "1";
        refresh();  // catch up on whatever happened while the socket was down
      } else if (m.type === "subscribed" && m.group === "invocations") {
        state("live");
      } else if (m.type === "approval.requested" || m.type === "approval.resolved") {
        refresh();
        feed("approval", m);
      } else if (m.type === "tool.executed") {
        feed("call", m);
      }
    };
    ws.onclose = function () {
      badge.dataset.live = "";
      state("disconnected, reconnecting…");
      setTimeout(connect, 3000);
    };
  }
  setInterval(refresh, 60000);  // requests that expire unanswered between sweeps send no event
  connect();
})();
