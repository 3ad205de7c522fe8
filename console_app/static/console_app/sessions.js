/* The console's sessions pages, live over /ws/events/ (the same socket protocol as dashboard.js and the approval
   queue: subscribe to groups, read {type, payload}).
   - list: `sessions` group; a `session.status` event updates its row (status, iterations, tokens, updated), written
     with textContent only (event data is hostile text); once subscribed, the page is read again to catch up.
   - timeline: `session.<id>` and each sub-session's group; any event about them re-reads the page's parts from the
     server (session_timeline_live: HTML the server rendered and escaped, the same templates as the page), so nothing
     here renders agent text. A burst of events costs one request. */
(function () {
  "use strict";
  var root = document.getElementById("goclaw-sessions");
  var urlEl = document.getElementById("goclaw-ws-url");
  if (!root || !urlEl) { return; }
  var wsUrl = JSON.parse(urlEl.textContent);
  var statusEl = document.getElementById("ws-status");
  var ws = null;
  var joined = {};
  var STATUS_RE = /[^a-z_]/g;
  var CSRF_RE = /name="csrfmiddlewaretoken" value="[^"]*"/g;

  function state(text) { if (statusEl) { statusEl.textContent = text; } }
  function subscribe(group) {
    if (joined[group] || !ws || ws.readyState !== 1) { return; }
    joined[group] = true;
    ws.send(JSON.stringify({action: "subscribe", group: group}));
  }
  function connect(groups, onEvent, onSubscribed) {
    ws = new WebSocket(wsUrl);
    joined = {};
    ws.onopen = function () { groups().forEach(subscribe); };
    ws.onmessage = function (e) {
      var m;
      try { m = JSON.parse(e.data); } catch (err) { return; }
      if (m.type === "subscribed") { state("live"); if (onSubscribed) { onSubscribed(m.group); } }
      else if (typeof m.type === "string" && m.type.indexOf("session.") === 0) { onEvent(m.type, m.payload || {}); }
    };
    ws.onclose = function () {
      state("disconnected, reconnecting…");
      setTimeout(function () { connect(groups, onEvent, onSubscribed); }, 3000);
    };
  }
  function setStatus(el, status) {
    el.textContent = String(status);
    el.className = "session-status session-status-" + String(status).replace(STATUS_RE, "");
  }

  // --- the list ---
  function listPage() {
    var body = document.getElementById("sessions-rows");
    var fresh = document.getElementById("sessions-new");
    function field(row, name, value) {
      var el = row.querySelector('[data-field="' + name + '"]');
      if (el && value != null) { el.textContent = String(value); }
    }
    function rowOf(id) {
      return body ? Array.prototype.find.call(body.rows, function (r) { return r.dataset.id === id; }) : null;
    }
    function update(row, values) {
      var status = row.querySelector('[data-field="status"]');
      if (status && typeof values.status === "string") { setStatus(status, values.status); }
      ["iterations", "max_iterations", "tokens_in", "tokens_out", "updated_at"].forEach(function (name) {
        field(row, name, values[name]);
      });
    }
    // Whatever changed between the page's rendering and the subscription (or while the socket was down): the page
    // is read again and its rows' values copied (as text) into the rows shown.
    function catchUp() {
      if (!body) { return; }
      fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) { return; }
          var doc = new DOMParser().parseFromString(html, "text/html");
          doc.querySelectorAll("#sessions-rows tr[data-id]").forEach(function (fetched) {
            var row = rowOf(fetched.dataset.id);
            if (!row) { return; }
            var values = {};
            fetched.querySelectorAll("[data-field]").forEach(function (el) { values[el.dataset.field] = el.textContent; });
            update(row, values);
          });
        })
        .catch(function () {});
    }
    connect(function () { return ["sessions"]; }, function (type, p) {
      if (type !== "session.status" || typeof p.id !== "string") { return; }
      var row = rowOf(p.id);
      if (!row) {
        if (fresh && root.dataset.firstPage) { fresh.hidden = false; }
        return;
      }
      var values = {status: p.status};
      ["iterations", "max_iterations", "tokens_in", "tokens_out"].forEach(function (name) {
        if (typeof p[name] === "number") { values[name] = p[name]; }
      });
      if (typeof p.updated_at === "string") { values.updated_at = p.updated_at.slice(0, 19).replace("T", " "); }
      update(row, values);
    }, function (group) { if (group === "sessions") { catchUp(); } });
  }

  // --- one session ---
  function timelinePage() {
    var sessionId = root.dataset.session;
    var list = document.getElementById("session-messages");
    var parts = {header: document.getElementById("session-header"),
                 approval: document.getElementById("session-approval"),
                 tree: document.getElementById("session-tree")};
    var timer = null, busy = false, again = false, rendered = {};

    function groups() {
      var names = ["session." + sessionId];
      parts.tree.querySelectorAll("li[data-session]").forEach(function (li) { names.push("session." + li.dataset.session); });
      return names;
    }
    function apply(d) {
      Object.keys(parts).forEach(function (name) {
        // replaced only when the server's rendering changed (a form being used is not swapped for an equal one;
        // the CSRF token is masked afresh on every rendering)
        if (typeof d[name] !== "string") { return; }
        var same = d[name].replace(CSRF_RE, "");
        if (rendered[name] !== same) { parts[name].innerHTML = d[name]; rendered[name] = same; }
      });
      groups().forEach(subscribe);  // sub-sessions that appeared since
      if (root.dataset.tail && typeof d.messages === "string" && d.last_seq > Number(root.dataset.lastSeq)) {
        list.insertAdjacentHTML("beforeend", d.messages);
        root.dataset.lastSeq = String(d.last_seq);
        var none = document.getElementById("session-no-messages");
        if (none) { none.hidden = true; }
      }
      return Boolean(root.dataset.tail) && d.more === true;
    }
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      var url = root.dataset.liveUrl + "?after=" + encodeURIComponent(root.dataset.lastSeq || "0");
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) { if (d && apply(d)) { again = true; } })
        .catch(function () {})
        .then(function () { busy = false; if (again) { again = false; schedule(); } });
    }
    function schedule() {
      if (timer) { return; }
      timer = setTimeout(function () { timer = null; refresh(); }, 150);
    }
    connect(groups, function () { schedule(); }, function (group) {
      // catch up on whatever happened before the subscription took (since the page was rendered, or while down)
      if (group === "session." + sessionId) { schedule(); }
    });
  }

  if (root.dataset.mode === "list") { listPage(); } else if (root.dataset.mode === "timeline") { timelinePage(); }
})();
