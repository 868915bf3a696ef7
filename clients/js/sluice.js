// sluice.js: a browser client for a sluice hub's `GET /events` (Server-Sent Events). It wraps
// the browser's EventSource and adds what a page needs of it: the last delivered id kept in
// storage and resumed from after a reload (never the same id twice to the application), a
// reconnection after the dead ends where EventSource gives up (a refusal, an expired token),
// and typed callbacks for messages, gaps and deleted topics. No dependencies; the hub serves
// this file at /sluice.js. The API is described in docs/CLIENT.md.

const STORAGE_PREFIX = "sluice.cursor.";

// `seq-incarnation` of an event id, or null for anything else.
function parseId(id) {
  const match = /^(\d+)-([0-9a-f]+)$/.exec(id || "");
  return match ? { seq: Number(match[1]), incarnation: match[2] } : null;
}

// Whether `id` lies at or before `cursor` in the same incarnation: delivered already.
function seen(cursor, id) {
  const a = parseId(cursor);
  const b = parseId(id);
  return !!a && !!b && a.incarnation === b.incarnation && b.seq <= a.seq;
}

// The storage named by `kind` ("session", "local" or "none"), or an in-memory one when the
// browser refuses it (private modes, disabled storage): a cursor then lasts the page's life.
function openStore(kind) {
  const memory = new Map();
  const fallback = {
    getItem: (k) => (memory.has(k) ? memory.get(k) : null),
    setItem: (k, v) => memory.set(k, v),
    removeItem: (k) => memory.delete(k),
  };
  if (kind === "none") return fallback;
  try {
    const store = kind === "local" ? window.localStorage : window.sessionStorage;
    const probe = STORAGE_PREFIX + "probe";
    store.setItem(probe, "1");
    store.removeItem(probe);
    return store;
  } catch (_) {
    return fallback;
  }
}

// Backoff for the `attempt`-th retry in a row: doubling from `base`, capped, with jitter of up
// to as much again, never below `atLeast` (a Retry-After).
function backoff(base, cap, attempt, atLeast) {
  const delay = Math.min(cap, base * 2 ** Math.min(attempt, 16));
  return Math.max(atLeast || 0, delay) + Math.random() * delay;
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch (_) {
    return data;
  }
}

/**
 * Subscribes to `options.topics` and keeps the subscription going until `close()`.
 * See docs/CLIENT.md for every option; the TypeScript types are in sluice.d.ts.
 */
export function subscribe(options) {
  const topics = [].concat(options.topics || []);
  if (topics.length === 0) throw new TypeError("sluice: topics must name at least one topic");
  const hub = (options.hub || "").replace(/\/+$/, "");
  const eventType = options.eventType || "message";
  const retryBase = options.retry || 1000;
  const retryCap = options.maxRetry || 30000;
  const key = STORAGE_PREFIX + (options.key || topics.join(" "));
  const store = openStore(options.storage || "session");
  const on = (name, ...args) => {
    if (typeof options[name] === "function") options[name](...args);
  };

  let cursor = store.getItem(key) || options.lastId || null;
  let token = null;
  let source = null;
  let timer = null;
  let failures = 0;
  let state = null;
  let closed = false;

  function setState(next, detail) {
    if (state === next && next !== "reconnecting") return;
    state = next;
    on("onState", next, detail || {});
  }

  function remember(id) {
    if (!id) return;
    cursor = id;
    try {
      store.setItem(key, id);
    } catch (_) {
      // Full or refused storage: the cursor lives on in memory for this page.
    }
  }

  function url() {
    const query = new URLSearchParams();
    for (const topic of topics) query.append("topic", topic);
    if (cursor) query.set("last-id", cursor);
    else if (options.from) query.set("from", options.from);
    if (options.repair) query.set("repair", options.repair);
    if (token && options.tokenParam) query.set(options.tokenParam, token);
    return hub + "/events?" + query.toString();
  }

  // Lets the EventSource carry the token in a cookie when no query parameter is named.
  function placeToken() {
    if (!token || options.tokenParam) return;
    const name = options.tokenCookie || "sluiceAuthorization";
    const secure = window.location.protocol === "https:" ? "; Secure" : "";
    document.cookie = name + "=" + token + "; path=/; SameSite=Strict" + secure;
  }

  async function freshToken() {
    if (typeof options.token !== "function") return false;
    token = (await options.token()) || null;
    return !!token;
  }

  function stop() {
    if (source) source.close();
    source = null;
    clearTimeout(timer);
    timer = null;
  }

  function retryIn(delay, detail) {
    stop();
    failures += 1;
    setState("reconnecting", Object.assign({ retryIn: Math.round(delay) }, detail));
    timer = setTimeout(connect, delay);
  }

  function end(detail) {
    stop();
    setState("closed", detail);
  }

  // Hands every event to `onEvent` as it came, for logs and consoles.
  function tell(type, event) {
    const data = parse(event.data);
    on("onEvent", { type, id: event.lastEventId, data });
    return data;
  }

  // Delivers one event of `type` unless its id was delivered already (a resume can repeat
  // nothing, but a reload between a delivery and its storing could).
  function listen(es, type, callback, shape) {
    es.addEventListener(type, (event) => {
      const id = event.lastEventId;
      if (id && seen(cursor, id)) return;
      remember(id);
      on(callback, shape(tell(type, event), id));
    });
  }

  async function connect() {
    stop();
    if (closed) return;
    if (state !== "reconnecting") setState("connecting", {});
    if (typeof options.token === "function" && !token) {
      const got = await freshToken().catch(() => false);
      if (closed) return;
      if (!got) return end({ reason: "no_token" });
    }
    placeToken();
    const es = new EventSource(url(), { withCredentials: !!options.withCredentials });
    source = es;
    let expired = false;
    let opened = false;
    let streaming = false;
    es.onopen = () => {
      opened = true;
    };
    es.addEventListener("connected", (event) => {
      streaming = true;
      failures = 0;
      if (!cursor) remember(event.lastEventId);
      setState("open", { topics: tell("connected", event).topics });
    });
    listen(es, eventType, "onMessage", (d, id) => ({
      topic: d.topic,
      payload: d.payload,
      time: d.time,
      id,
    }));
    listen(es, "gap", "onGap", (d, id) => Object.assign({ id }, d));
    listen(es, "deleted", "onDeleted", (d, id) => Object.assign({ id }, d));
    es.addEventListener("token_expired", (event) => {
      expired = true;
      tell("token_expired", event);
    });
    es.onerror = () => {
      if (source !== es || closed) return;
      if (expired) return renew("token_expired");
      // The browser retries a dropped stream by itself (honouring the hub's `retry:`, with
      // `Last-Event-ID`); it gives up only on a refusal, which is asked about below. A stream
      // that ended before `connected` was the hub turning it away for now (200 and `retry:`).
      if (es.readyState !== EventSource.CLOSED) {
        const reason = opened && !streaming ? "refused" : "disconnected";
        opened = streaming = false;
        return setState("reconnecting", { reason });
      }
      es.close();
      explain();
    };
  }

  async function renew(reason, detail) {
    stop();
    setState("reconnecting", Object.assign({ reason }, detail));
    const renewed = await freshToken().catch(() => false);
    if (closed) return;
    if (renewed) connect();
    else end(Object.assign({ reason }, detail));
  }

  // The EventSource was refused: the same request without it says why, and for how long.
  async function explain() {
    let answer;
    try {
      answer = await fetch(url(), {
        headers: { Accept: "application/json" },
        credentials: options.withCredentials ? "include" : "same-origin",
      });
    } catch (_) {
      return retryIn(backoff(retryBase, retryCap, failures), { reason: "unreachable" });
    }
    if (answer.ok) {
      if (answer.body) answer.body.cancel();
      return retryIn(backoff(retryBase, retryCap, failures), { reason: "disconnected" });
    }
    const text = await answer.text().catch(() => "");
    const status = answer.status;
    const description = (parse(text) || {}).description || text.trim();
    if (status === 401 && failures === 0 && typeof options.token === "function") {
      failures += 1;
      token = null;
      return renew("unauthorized", { status, description });
    }
    if (status === 429 || status >= 500) {
      const after = Number(answer.headers.get("Retry-After")) * 1000 || 0;
      return retryIn(backoff(retryBase, retryCap, failures, after), {
        reason: status === 429 ? "refused" : "unavailable",
        status,
        description,
      });
    }
    end({ reason: status === 401 ? "unauthorized" : status === 403 ? "forbidden" : "bad_request", status, description });
  }

  const online = () => {
    if (!closed && state !== "open") connect();
  };
  window.addEventListener("online", online);
  connect();

  return {
    /** Where the subscription is: `connecting`, `open`, `reconnecting` or `closed`. */
    get state() {
      return state;
    },
    /** The id of the last event delivered (and stored), or null. */
    get lastId() {
      return cursor;
    },
    /** Stops for good; the stored cursor stays for the next subscription with this key. */
    close() {
      closed = true;
      window.removeEventListener("online", online);
      end({ reason: "closed" });
    },
  };
}
