/* turnkeeper console: a live view of threads, messages and runs over the public HTTP API.
 *
 * Everything goes through /v1 with the token the person entered (sessionStorage of this
 * tab, sent as a bearer header, never put into an address). The event log is read once
 * in pages (GET /v1/events), then followed live on GET /v1/events/stream with fetch()
 * and a streaming body reader: EventSource cannot send an Authorization header. A lost
 * stream is opened again with Last-Event-ID, so no event is skipped or applied twice.
 * Held agent sends come from message.held events, which only the owner's token reads.
 * Content is always inserted as text, never as markup.
 */
"use strict";

(function () {
  const TOKEN_KEY = "turnkeeper.console.token";
  /* First pause before reconnecting the stream; doubled per failed attempt. */
  const RECONNECT_FIRST_MS = 500;
  const RECONNECT_MAX_MS = 15000;
  /* No byte for this long (heartbeats come every stream.heartbeat_seconds, 15 by
   * default): the stream counts as lost and is opened again. */
  const STREAM_IDLE_MS = 60000;
  const EXCERPT_CHARS = 60;
  const SHORT_ID_CHARS = 8;
  const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const MENTION_RE = /(^|\s)@([A-Za-z0-9][A-Za-z0-9_.-]*)/g;
  const ACTIVE_RUN_STATES = new Set(["queued", "running", "waiting_input"]);
  const TRIGGER_WORDS = {
    received: "received",
    queued: "queued",
    working: "working",
    done: "done",
    failed: "failed",
    cancelled: "cancelled",
    followup_delivered: "follow-up delivered",
  };
  const SVG_NS = "http://www.w3.org/2000/svg";
  /* Icon shapes on a 16 x 16 grid, drawn with the text colour. */
  const ICONS = {
    received: [["circle", { cx: 8, cy: 8, r: 5.5 }]],
    queued: [["circle", { cx: 8, cy: 8, r: 5.5 }], ["path", { d: "M8 4.5V8l2.5 1.5" }]],
    working: [["path", { d: "M8 2.5a5.5 5.5 0 1 1-5.5 5.5" }], ["path", { d: "M8 2.5v3" }]],
    running: [["path", { d: "M8 2.5a5.5 5.5 0 1 1-5.5 5.5" }], ["path", { d: "M8 2.5v3" }]],
    waiting_input: [["circle", { cx: 8, cy: 8, r: 5.5 }], ["path", { d: "M6.5 5.5v5M9.5 5.5v5" }]],
    done: [["path", { d: "M3 8.5l3 3 7-7" }]],
    completed: [["path", { d: "M3 8.5l3 3 7-7" }]],
    failed: [["path", { d: "M4 4l8 8M12 4l-8 8" }]],
    cancelled: [["circle", { cx: 8, cy: 8, r: 5.5 }], ["path", { d: "M4.2 11.8l7.6-7.6" }]],
    followup_delivered: [["path", { d: "M2 8.5l3 3 5-5" }], ["path", { d: "M8 11.5l6-6" }]],
    held: [["rect", { x: 3, y: 3, width: 10, height: 10, rx: 2 }], ["path", { d: "M6.5 6v4M9.5 6v4" }]],
    lock: [["rect", { x: 3.5, y: 7, width: 9, height: 6.5, rx: 1 }],
           ["path", { d: "M5.5 7V5a2.5 2.5 0 0 1 5 0v2" }]],
  };

  const state = {
    token: null,
    me: null,
    generation: 0,
    cursor: 0,
    controller: null,
    threads: new Map(),
    /* Listed threads waiting for their one read of GET /v1/threads/{id}. */
    undescribed: [],
    runs: new Map(),
    principals: new Map(),
    selected: null,
    renderQueued: false,
    pendingPost: null,
  };

  const byId = (id) => document.getElementById(id);

  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && problem.title) || "HTTP " + status);
      this.status = status;
      this.problem = problem || {};
    }

    describe() {
      const problem = this.problem;
      let text = this.status + " " + (problem.code || "error");
      if (problem.reason) text += " (" + problem.reason + ")";
      if (Array.isArray(problem.errors) && problem.errors.length) {
        text += ": " + problem.errors.map((e) => e.pointer + " " + e.code).join(", ");
      }
      return text;
    }
  }

  function describe(error) {
    return error instanceof ApiError ? error.describe() : "the server could not be reached";
  }

  /* -- HTTP ------------------------------------------------------------------------- */

  function authHeaders(extra) {
    return Object.assign({ Authorization: "Bearer " + state.token }, extra || {});
  }

  async function api(method, path, body) {
    const init = {
      method: method,
      headers: authHeaders({ Accept: "application/json" }),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (response.status === 204) return null;
    let data = null;
    try {
      data = await response.json();
    } catch (ignored) {
      data = null;
    }
    if (!response.ok) {
      const error = new ApiError(response.status, data);
      if (response.status === 401) signOut("The server refused the token (401).");
      throw error;
    }
    return data;
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  /* -- the model ---------------------------------------------------------------------- */

  function remember(principal) {
    if (principal && principal.id && principal.handle) state.principals.set(principal.id, principal);
  }

  function handleOf(id) {
    const principal = state.principals.get(id);
    return principal ? "@" + principal.handle : "principal " + shortId(id);
  }

  function principalByHandle(handle) {
    const wanted = handle.toLowerCase();
    for (const principal of state.principals.values()) {
      if (principal.handle.toLowerCase() === wanted) return principal;
    }
    return null;
  }

  function threadEntry(id, scope) {
    let entry = state.threads.get(id);
    if (!entry) {
      entry = { id: id, spaceId: null, channelId: null, doc: null, described: false, messages: new Map(), held: new Map() };
      state.threads.set(id, entry);
    }
    if (scope && scope.space_id) entry.spaceId = scope.space_id;
    if (scope && scope.channel_id) entry.channelId = scope.channel_id;
    /* An event of the thread: this token reads it (again). */
    if (scope) entry.unreadable = false;
    return entry;
  }

  function runEntry(id, threadId) {
    let run = state.runs.get(id);
    if (!run) {
      run = { id: id, threadId: threadId, summary: null, doc: null, fetching: false, again: false };
      state.runs.set(id, run);
    }
    return run;
  }

  function setThreadDoc(entry, doc) {
    entry.doc = doc;
    if (doc.channel_id) entry.channelId = doc.channel_id;
  }

  function upsertMessage(entry, message) {
    const known = entry.messages.get(message.id);
    if (!known || (message.version || 0) >= (known.version || 0)) entry.messages.set(message.id, message);
    remember(message.author);
    if (entry.doc && message.thread_seq > (entry.doc.latest_seq || 0)) {
      entry.doc = Object.assign({}, entry.doc, { latest_seq: message.thread_seq });
    }
    if (message.kind === "run" && message.run_id) {
      runEntry(message.run_id, entry.id);
      if (state.selected === entry.id) fetchRun(message.run_id);
    }
  }

  function applyEvent(event) {
    if (typeof event.seq === "number" && event.seq > state.cursor) state.cursor = event.seq;
    const scope = event.scope || {};
    const payload = event.payload || {};
    if (!scope.thread_id) return;
    const entry = threadEntry(scope.thread_id, scope);
    if (event.type === "thread.created" && payload.thread) {
      setThreadDoc(entry, payload.thread);
    } else if (event.type === "thread.reopened") {
      if (entry.doc) entry.doc = Object.assign({}, entry.doc, { state: "open" });
      if (state.selected === entry.id) {
        threadStatus("Thread reopened.");
        refreshThread(entry);
      }
    } else if ((event.type === "message.created" || event.type === "message.updated") && payload.message) {
      upsertMessage(entry, payload.message);
    } else if (event.type === "message.held") {
      /* The owner's only: an agent send the freshness gate held (no content). */
      remember(payload.author);
      entry.held.set(event.seq, {
        seq: event.seq,
        author: payload.author || {},
        seen: payload.seen_up_to_seq,
        latest: payload.latest_seq,
        clientId: payload.client_message_id,
        runId: payload.run_id,
        at: event.created_at,
      });
    } else if (event.type === "run.state_changed" && payload.run_id) {
      const run = runEntry(payload.run_id, entry.id);
      if (!run.summary || payload.version >= run.summary.version) {
        run.summary = { state: payload.state, state_reason: payload.state_reason, version: payload.version };
      }
      if (state.selected === entry.id) fetchRun(run.id);
    }
    describeLater(entry);
    schedule();
  }

  /* A listed thread without its Thread (a main thread has no thread.created event) is
   * read once for its title and state, one thread at a time, so a long event log does
   * not become a burst of reads. */
  function describeLater(entry) {
    if (entry.doc || entry.described) return;
    entry.described = true;
    state.undescribed.push(entry);
    if (state.undescribed.length === 1) describeQueued(state.generation, state.undescribed);
  }

  async function describeQueued(generation, queue) {
    while (queue.length && generation === state.generation) {
      const entry = queue[0];
      if (!entry.doc) {
        try {
          const doc = await api("GET", "/v1/threads/" + encodeURIComponent(entry.id));
          if (generation !== state.generation) return;
          if (!entry.doc) setThreadDoc(entry, doc);
          schedule();
        } catch (ignored) {
          /* Listed as "Thread <id end>"; opening it reads it again and says why. */
        }
      }
      queue.shift();
    }
  }

  async function fetchRun(id) {
    const run = state.runs.get(id);
    if (!run) return;
    if (run.fetching) {
      run.again = true;
      return;
    }
    run.fetching = true;
    try {
      do {
        run.again = false;
        const doc = await api("GET", "/v1/runs/" + encodeURIComponent(id));
        if (!run.doc || doc.version >= run.doc.version) run.doc = doc;
        if (!run.summary || doc.version >= run.summary.version) {
          run.summary = { state: doc.state, state_reason: doc.state_reason, version: doc.version };
        }
        run.error = null;
        schedule();
      } while (run.again);
    } catch (error) {
      run.error = describe(error);
      schedule();
    } finally {
      run.fetching = false;
    }
  }

  async function refreshThread(entry) {
    try {
      setThreadDoc(entry, await api("GET", "/v1/threads/" + encodeURIComponent(entry.id)));
      schedule();
    } catch (error) {
      threadStatus("Cannot read the thread: " + describe(error));
    }
  }

  async function loadMessages(entry) {
    let after = 0;
    for (;;) {
      const path = "/v1/threads/" + encodeURIComponent(entry.id) + "/messages?after_seq=" + after;
      const page = await api("GET", path);
      for (const message of page.messages) upsertMessage(entry, message);
      if (!page.messages.length || page.covers_through_seq <= after) return;
      after = page.covers_through_seq;
    }
  }

  /* -- the event log: pages, then the stream ------------------------------------------ */

  async function readPages(generation) {
    for (;;) {
      const page = await api("GET", "/v1/events?after=" + state.cursor);
      if (generation !== state.generation) return;
      for (const event of page.events) applyEvent(event);
      const moved = page.next_after > state.cursor;
      if (page.next_after > state.cursor) state.cursor = page.next_after;
      if (!page.events.length || !moved) return;
    }
  }

  async function follow(generation) {
    let delay = RECONNECT_FIRST_MS;
    while (generation === state.generation) {
      const controller = new AbortController();
      state.controller = controller;
      let idle = null;
      const touch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => controller.abort(), STREAM_IDLE_MS);
      };
      try {
        touch();
        const response = await fetch("/v1/events/stream", {
          headers: authHeaders({ Accept: "text/event-stream", "Last-Event-ID": String(state.cursor) }),
          cache: "no-store",
          credentials: "omit",
          referrerPolicy: "no-referrer",
          signal: controller.signal,
        });
        if (response.status === 401) {
          signOut("The server refused the token (401).");
          return;
        }
        if (!response.ok) {
          const retry = Number(response.headers.get("Retry-After"));
          if (retry > 0) delay = Math.max(delay, retry * 1000);
          throw new Error("stream answered " + response.status);
        }
        setLive("live", "Live");
        delay = RECONNECT_FIRST_MS;
        await readStream(response.body, generation, touch);
      } catch (ignored) {
        /* lost, refused or idle: opened again below */
      } finally {
        clearTimeout(idle);
      }
      if (generation !== state.generation) return;
      setLive("reconnecting", "Reconnecting in " + Math.ceil(delay / 1000) + " s");
      await sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  async function readStream(body, generation, touch) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let data = [];
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done || generation !== state.generation) {
        reader.cancel().catch(() => {});
        return;
      }
      touch();
      buffer += chunk.value;
      for (;;) {
        const at = buffer.search(/\r\n|\r|\n/);
        /* A CR at the very end may be the first half of a CRLF: wait for more. */
        if (at < 0 || (at === buffer.length - 1 && buffer[at] === "\r")) break;
        const width = buffer[at] === "\r" && buffer[at + 1] === "\n" ? 2 : 1;
        const line = buffer.slice(0, at);
        buffer = buffer.slice(at + width);
        if (line === "") {
          if (data.length) applyEvent(JSON.parse(data.join("\n")));
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        }
        /* "id:" equals the event's seq, "event:" its type, ":" lines are heartbeats. */
      }
    }
  }

  /* -- sign-in ------------------------------------------------------------------------ */

  async function signIn(token) {
    state.token = token;
    try {
      state.me = await api("GET", "/v1/me");
    } catch (error) {
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      byId("sign-in").hidden = false;
      byId("sign-in-error").textContent = "Sign-in failed: " + describe(error);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    remember(state.me);
    clearPage();
    byId("sign-in").hidden = true;
    byId("app").hidden = false;
    byId("sign-out").hidden = false;
    const me = byId("me");
    me.hidden = false;
    me.textContent = "Signed in as @" + state.me.handle + " (" + state.me.kind + ")";
    const generation = ++state.generation;
    setLive("loading", "Reading the event log");
    try {
      await readPages(generation);
    } catch (error) {
      if (generation !== state.generation) return;
      setLive("reconnecting", "Event log unreadable: " + describe(error));
    }
    if (generation !== state.generation) return;
    const fromHash = threadFromHash();
    if (fromHash) selectThread(fromHash, false);
    schedule();
    follow(generation);
  }

  function signOut(message) {
    state.generation += 1;
    if (state.controller) state.controller.abort();
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.me = null;
    state.cursor = 0;
    state.threads.clear();
    state.undescribed = [];
    state.runs.clear();
    state.principals.clear();
    state.selected = null;
    state.pendingPost = null;
    /* Nothing of this token stays in the page, nor the thread in the address. */
    clearPage();
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    byId("app").hidden = true;
    byId("sign-out").hidden = true;
    byId("me").hidden = true;
    byId("sign-in").hidden = false;
    byId("sign-in-error").textContent = message || "";
    byId("token-input").value = "";
    setLive("offline", "Offline");
    byId("token-input").focus();
  }

  function clearPage() {
    byId("thread-tree").replaceChildren();
    byId("timeline").replaceChildren();
    byId("thread-title").textContent = "";
    byId("thread-meta").replaceChildren();
    byId("held-count").textContent = "";
    byId("thread-view").hidden = true;
    byId("thread-empty").hidden = false;
    byId("message-input").value = "";
    byId("open-thread-input").value = "";
    byId("composer-status").textContent = "";
    threadStatus("");
  }

  function setLive(kind, text) {
    const live = byId("live-status");
    live.dataset.state = kind;
    live.textContent = text;
  }

  /* -- selection and actions -------------------------------------------------------- */

  function threadFromHash() {
    const match = /^#thread=([0-9a-fA-F-]{36})$/.exec(location.hash);
    return match && UUID_RE.test(match[1]) ? match[1].toLowerCase() : null;
  }

  async function selectThread(id, moveFocus) {
    state.selected = id;
    const known = state.threads.has(id) && !state.threads.get(id).unreadable;
    const entry = threadEntry(id);
    /* Read here: no second read of it from the list. */
    entry.described = true;
    if (location.hash !== "#thread=" + id) history.replaceState(null, "", "#thread=" + id);
    threadStatus("");
    render();
    if (moveFocus) byId("thread").focus();
    try {
      const docs = await Promise.all([
        api("GET", "/v1/threads/" + encodeURIComponent(id)),
        loadMessages(entry),
      ]);
      setThreadDoc(entry, docs[0]);
    } catch (error) {
      /* Not read after all: the list may read it on its next event. */
      entry.described = false;
      /* Opened by id and not readable: not listed (the list holds readable threads). */
      if (!known && !entry.doc && !entry.messages.size) {
        entry.unreadable = true;
        renderTree();
      }
      threadStatus("Cannot open the thread: " + describe(error));
    }
    for (const run of state.runs.values()) if (run.threadId === id) fetchRun(run.id);
    schedule();
  }

  function threadStatus(text) {
    byId("thread-status").textContent = text;
  }

  function parseMentions(content) {
    const ids = [];
    const unknown = [];
    for (const match of content.matchAll(MENTION_RE)) {
      const word = match[2].replace(/\.+$/, "");
      let id = null;
      if (UUID_RE.test(word)) {
        id = word.toLowerCase();
      } else {
        const principal = principalByHandle(word);
        if (principal) id = principal.id;
        else unknown.push("@" + word);
      }
      if (id && !ids.includes(id)) ids.push(id);
    }
    return { ids: ids, unknown: unknown };
  }

  async function post(event) {
    event.preventDefault();
    const threadId = state.selected;
    const input = byId("message-input");
    const status = byId("composer-status");
    const content = input.value;
    if (!threadId || !content.trim()) return;
    const mentions = parseMentions(content);
    if (mentions.unknown.length) {
      status.textContent = "Unknown " + mentions.unknown.join(", ") +
        ": the console knows the handles of the principals it has seen; write @<principal id>.";
      return;
    }
    /* The same text posted again after a lost answer keeps its key: no double post. */
    const pending = state.pendingPost;
    const key = pending && pending.threadId === threadId && pending.content === content
      ? pending.key : randomKey();
    state.pendingPost = { threadId: threadId, content: content, key: key };
    const body = { client_msg_id: key, content: content };
    if (mentions.ids.length) body.mentions = mentions.ids;
    status.textContent = "Posting...";
    try {
      const answer = await api("POST", "/v1/threads/" + encodeURIComponent(threadId) + "/messages", body);
      state.pendingPost = null;
      input.value = "";
      /* API.md's answer carries `trigger`; without it, the message's own state tells. */
      const trigger = answer.trigger || null;
      let text = "Posted #" + answer.thread_seq;
      if (trigger) {
        text += "; trigger: " + trigger.outcome;
        if (trigger.mode) text += " (" + trigger.mode + ")";
        if (trigger.reason) text += ", " + trigger.reason;
      } else if (answer.trigger_state) {
        text += "; trigger state: " + (TRIGGER_WORDS[answer.trigger_state] || answer.trigger_state);
        if (answer.trigger_state_reason) text += ", " + answer.trigger_state_reason;
      }
      status.textContent = text;
      const entry = threadEntry(threadId);
      delete answer.trigger;
      upsertMessage(entry, answer);
      if (trigger && trigger.run_id) {
        runEntry(trigger.run_id, threadId);
        fetchRun(trigger.run_id);
      }
      schedule();
    } catch (error) {
      status.textContent = "Not posted: " + describe(error);
    }
  }

  async function cancelRun(runId) {
    threadStatus("Cancelling the run...");
    try {
      const doc = await api("POST", "/v1/runs/" + encodeURIComponent(runId) + "/cancel");
      const run = runEntry(runId, doc.thread_id);
      if (!run.doc || doc.version >= run.doc.version) run.doc = doc;
      if (!run.summary || doc.version >= run.summary.version) {
        run.summary = { state: doc.state, state_reason: doc.state_reason, version: doc.version };
      }
      threadStatus(doc.cancel_requested ? "Cancel requested; the agent confirms." : "Run " + doc.state + ".");
      schedule();
    } catch (error) {
      threadStatus("Not cancelled: " + describe(error));
    }
  }

  async function closeThread() {
    const id = state.selected;
    if (!id) return;
    threadStatus("Closing the thread...");
    try {
      setThreadDoc(threadEntry(id), await api("POST", "/v1/threads/" + encodeURIComponent(id) + "/close"));
      threadStatus("Thread closed.");
      schedule();
    } catch (error) {
      threadStatus("Not closed: " + describe(error));
    }
  }

  /* -- rendering ---------------------------------------------------------------------- */

  function schedule() {
    if (state.renderQueued) return;
    state.renderQueued = true;
    setTimeout(() => {
      state.renderQueued = false;
      render();
    }, 0);
  }

  function el(tag, attributes, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children || []) if (child) node.append(child);
    return node;
  }

  function icon(name) {
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("viewBox", "0 0 16 16");
    svg.setAttribute("width", "16");
    svg.setAttribute("height", "16");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    svg.setAttribute("class", "icon icon-" + name);
    for (const [tag, attrs] of ICONS[name] || ICONS.received) {
      const shape = document.createElementNS(SVG_NS, tag);
      for (const [key, value] of Object.entries(attrs)) shape.setAttribute(key, String(value));
      svg.append(shape);
    }
    return svg;
  }

  function shortId(id) {
    return id ? id.slice(-SHORT_ID_CHARS) : "?";
  }

  function excerpt(text) {
    const flat = (text || "").replace(/\s+/g, " ").trim();
    return flat.length > EXCERPT_CHARS ? flat.slice(0, EXCERPT_CHARS - 3) + "..." : flat;
  }

  function clock(iso) {
    const date = new Date(iso);
    return isNaN(date) ? "" : date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function threadLabel(entry) {
    if (entry.doc && entry.doc.title) return entry.doc.title;
    return "Thread " + shortId(entry.id);
  }

  function render() {
    if (!state.me) return;
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.focusKey : undefined;
    renderTree();
    renderThread();
    if (focused) {
      const again = document.querySelector('[data-focus-key="' + CSS.escape(focused) + '"]');
      if (again && again !== document.activeElement) again.focus();
    }
  }

  function renderTree() {
    /* A thread opened by id knows its channel (the Thread names no space): it goes under
     * the space that any event named for that channel, so a channel is listed once. */
    const spaceOfChannel = new Map();
    for (const entry of state.threads.values()) {
      if (entry.spaceId && entry.channelId) spaceOfChannel.set(entry.channelId, entry.spaceId);
    }
    const spaces = new Map();
    for (const entry of state.threads.values()) {
      if (entry.unreadable) continue;
      const space = entry.spaceId || spaceOfChannel.get(entry.channelId) || "";
      const channel = entry.channelId || "";
      if (!spaces.has(space)) spaces.set(space, new Map());
      const channels = spaces.get(space);
      if (!channels.has(channel)) channels.set(channel, []);
      channels.get(channel).push(entry);
    }
    const tree = byId("thread-tree");
    tree.replaceChildren();
    if (!spaces.size) {
      tree.append(el("p", { className: "hint", text: "No readable events yet." }));
      return;
    }
    for (const [space, channels] of spaces) {
      const section = el("section", { className: "space" }, [
        el("h3", { text: space ? "Space " + shortId(space) : "Space not yet known", title: space || null }),
      ]);
      for (const [channel, entries] of channels) {
        section.append(el("h4", { text: channel ? "Channel " + shortId(channel) : "Channel not yet known", title: channel || null }));
        const list = el("ul", { className: "thread-list" });
        for (const entry of entries) {
          const threadState = entry.doc ? entry.doc.state : null;
          const button = el("button", {
            type: "button",
            className: "thread-link",
            "data-thread-id": entry.id,
            "data-focus-key": "thread-" + entry.id,
            "aria-current": state.selected === entry.id ? "true" : null,
          }, [
            el("span", { className: "thread-name", text: threadLabel(entry) }),
            threadState ? el("span", { className: "badge state-" + threadState, text: threadState }) : null,
          ]);
          button.addEventListener("click", () => selectThread(entry.id, true));
          list.append(el("li", {}, [button]));
        }
        section.append(list);
      }
      tree.append(section);
    }
  }

  function renderThread() {
    const entry = state.selected ? state.threads.get(state.selected) : null;
    byId("thread-empty").hidden = !!entry;
    byId("thread-view").hidden = !entry;
    if (!entry) return;
    const doc = entry.doc;
    byId("thread-title").textContent = threadLabel(entry);
    const meta = byId("thread-meta");
    meta.replaceChildren();
    if (doc) {
      meta.append(
        el("span", { className: "badge state-" + doc.state, "data-thread-state": doc.state, text: doc.state }),
        el("span", { text: "channel " + shortId(doc.channel_id), title: doc.channel_id }),
        el("span", { text: "latest seq " + doc.latest_seq }),
      );
      if (doc.operator_id) meta.append(el("span", { text: "operator " + handleOf(doc.operator_id) }));
      meta.append(el("span", { className: "mono", text: "id " + entry.id }));
    }
    byId("close-thread").hidden = !doc || doc.state !== "open";

    const timeline = byId("timeline");
    const nearBottom = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
    const scrolled = timeline.scrollTop;
    timeline.replaceChildren();
    const messages = Array.from(entry.messages.values()).sort((a, b) => a.thread_seq - b.thread_seq);
    /* A held send stands after the newest message it was held for. */
    const held = Array.from(entry.held.values()).sort((a, b) => a.latest - b.latest || a.seq - b.seq);
    if (!messages.length) timeline.append(el("li", { className: "hint", text: "No messages this token may read." }));
    let next = 0;
    for (const message of messages) {
      while (next < held.length && held[next].latest < message.thread_seq) timeline.append(renderHeld(held[next++]));
      timeline.append(renderMessage(entry, message));
    }
    while (next < held.length) timeline.append(renderHeld(held[next++]));
    timeline.scrollTop = nearBottom ? timeline.scrollHeight : scrolled;
    const count = byId("held-count");
    count.textContent = held.length ? " (" + held.length + " in this thread)" : "";
  }

  function renderHeld(held) {
    const who = "@" + (held.author.handle || shortId(held.author.id));
    const label = "Held send by " + who + ": it had read through #" + held.seen +
      ", the thread was at #" + held.latest;
    const header = el("header", { className: "message-head" }, [
      el("span", { className: "author", text: who }),
      el("span", { className: "badge origin origin-agent", text: "agent" }),
      el("span", { className: "badge held-badge", role: "img", title: label, "aria-label": label },
        [icon("held"), el("span", { text: "held", "aria-hidden": "true" })]),
      el("time", { datetime: held.at, text: clock(held.at) }),
    ]);
    const facts = "Not posted: the freshness gate held this send, as the agent had read through #" +
      held.seen + " while the thread was at #" + held.latest + ".";
    const body = el("article", { className: "message held-send", "aria-label": label }, [
      header,
      el("p", { className: "content", text: facts }),
    ]);
    const extra = [];
    if (held.runId) extra.push("run " + shortId(held.runId));
    if (held.clientId) extra.push("client id " + held.clientId);
    if (extra.length) body.append(el("p", { className: "mentions mono", text: extra.join(", ") }));
    return el("li", {
      className: "held-entry",
      "data-held-seq": held.seq,
      "data-held-seen": held.seen,
      "data-held-latest": held.latest,
    }, [body]);
  }

  function renderMessage(entry, message) {
    const origin = message.origin || "human";
    const author = message.author || {};
    const header = el("header", { className: "message-head" }, [
      el("span", { className: "author", text: "@" + (author.handle || shortId(author.id)) }),
      el("span", { className: "badge origin origin-" + origin, text: origin }),
    ]);
    if (Array.isArray(message.restricted_to)) {
      const who = message.restricted_to.map(handleOf).join(", ");
      header.append(el("span", {
        className: "badge restricted",
        title: "Restricted: visible only to " + who,
        "aria-label": "Restricted: visible only to " + who,
        role: "img",
        "data-restricted": "true",
      }, [icon("lock"), el("span", { text: "restricted", "aria-hidden": "true" })]));
    }
    if (message.trigger_state) {
      const word = TRIGGER_WORDS[message.trigger_state] || message.trigger_state;
      let label = "Trigger state: " + word;
      if (message.trigger_state_reason) label += ", reason: " + message.trigger_state_reason;
      header.append(el("span", {
        className: "trigger trigger-" + message.trigger_state,
        role: "img",
        title: label,
        "aria-label": label,
        "data-trigger-state": message.trigger_state,
      }, [icon(message.trigger_state), el("span", { className: "trigger-word", text: word, "aria-hidden": "true" })]));
    }
    header.append(
      el("time", { datetime: message.created_at, text: clock(message.created_at) }),
      el("span", { className: "seq", text: "#" + message.thread_seq }),
    );
    const body = el("article", {
      className: "message origin-" + origin + " kind-" + message.kind,
      "aria-label": "Message " + message.thread_seq + " by @" + (author.handle || shortId(author.id)),
    }, [header]);
    if (message.kind !== "run") body.append(el("p", { className: "content", text: message.content }));
    if (message.mentions && message.mentions.length) {
      body.append(el("p", { className: "mentions", text: "Mentions " + message.mentions.map(handleOf).join(", ") }));
    }
    if (message.kind === "run" && message.run_id) body.append(renderRun(entry, message));
    return el("li", {
      id: "m-" + message.id,
      "data-message-id": message.id,
      "data-seq": message.thread_seq,
      "data-trigger-state": message.trigger_state || null,
    }, [body]);
  }

  function messageRef(entry, id) {
    const message = entry.messages.get(id);
    if (!message) return el("span", { text: "a message this token cannot read" });
    const link = el("a", { href: "#m-" + id, className: "ref", "data-focus-key": "ref-" + id },
      ["#" + message.thread_seq + " " + excerpt(message.content)]);
    /* Moves to the message without replacing #thread=<id>, the address one keeps. */
    link.addEventListener("click", (event) => {
      event.preventDefault();
      focusTarget(byId("m-" + id));
    });
    return link;
  }

  function focusTarget(target) {
    if (!target) return;
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus();
    target.scrollIntoView({ block: "nearest" });
  }

  function renderRun(entry, anchor) {
    const run = runEntry(anchor.run_id, entry.id);
    const doc = run.doc;
    const summary = run.summary || (doc ? { state: doc.state, state_reason: doc.state_reason } : null);
    const runState = summary ? summary.state : "unknown";
    const ended = summary && !ACTIVE_RUN_STATES.has(runState);
    const rows = [
      ["State", el("span", { className: "run-state", "data-run-state-text": runState }, [icon(runState), " " + runState])],
      ["Agent", el("span", { text: handleOf(doc ? doc.agent_id : anchor.author.id) })],
    ];
    if (doc) {
      rows.push(["Trigger message", messageRef(entry, doc.triggering_message_id)]);
      const followups = Object.entries(doc.followups || {});
      const list = el("ul", { className: "followups" });
      for (const [messageId, followup] of followups) {
        list.append(el("li", { "data-followup-id": messageId, "data-followup-state": followup.state }, [
          messageRef(entry, messageId),
          el("span", { className: "badge followup-" + followup.state, text: followup.state }),
        ]));
      }
      rows.push(["Follow-ups", followups.length ? list : el("span", { text: "none" })]);
      rows.push(["Cancel requested", el("span", { "data-cancel-requested": doc.cancel_requested ? "true" : "false", text: doc.cancel_requested ? "yes" : "no" })]);
    }
    if (summary && summary.state_reason) rows.push([ended ? "End reason" : "Reason", el("span", { className: "mono", "data-end-reason": summary.state_reason, text: summary.state_reason })]);
    if (run.error) rows.push(["Last read", el("span", { className: "error", text: run.error })]);
    const list = el("dl", { className: "run-facts" });
    for (const [term, value] of rows) list.append(el("dt", { text: term }), el("dd", {}, [value]));
    const box = el("section", {
      className: "run run-" + runState,
      "data-run-id": run.id,
      "data-run-state": runState,
      "aria-label": "Run " + shortId(run.id) + ", " + runState,
    }, [el("h3", { text: "Run " + shortId(run.id) }), list]);
    if (summary && !ended && !(doc && doc.cancel_requested)) {
      const cancel = el("button", { type: "button", className: "cancel-run", "data-focus-key": "cancel-" + run.id, text: "Cancel run" });
      cancel.addEventListener("click", () => cancelRun(run.id));
      box.append(cancel);
    }
    return box;
  }

  /* -- start ---------------------------------------------------------------------------- */

  function start() {
    byId("sign-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = byId("token-input").value.trim();
      byId("token-input").value = "";
      if (token) signIn(token);
    });
    byId("sign-out").addEventListener("click", () => signOut("Signed out."));
    document.querySelector("a.skip").addEventListener("click", (event) => {
      event.preventDefault();
      focusTarget(byId("thread"));
    });
    byId("open-thread-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = byId("open-thread-input");
      const id = input.value.trim().toLowerCase();
      if (!UUID_RE.test(id)) {
        threadStatus("");
        input.setCustomValidity("A thread id is a UUID.");
        input.reportValidity();
        return;
      }
      input.setCustomValidity("");
      input.value = "";
      selectThread(id, true);
    });
    byId("open-thread-input").addEventListener("input", (event) => event.target.setCustomValidity(""));
    byId("composer").addEventListener("submit", post);
    byId("message-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        byId("composer").requestSubmit();
      }
    });
    byId("close-thread").addEventListener("click", closeThread);
    window.addEventListener("hashchange", () => {
      const id = threadFromHash();
      if (id && id !== state.selected && state.me) selectThread(id, false);
    });
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) signIn(saved);
    else byId("token-input").focus();
  }

  start();
})();
