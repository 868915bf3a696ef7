// Types of sluice.js, the browser client for a sluice hub's `GET /events`.

/** Where a subscription is. */
export type State = "connecting" | "open" | "reconnecting" | "closed";

/** Why a subscription is where it is, and what the hub said. */
export interface StateDetail {
  /**
   * `disconnected` (the stream dropped; the browser reconnects), `unreachable` (no answer),
   * `refused` (turned away for now: too many connections, a 429), `unavailable` (503: the
   * backend or the hub is not ready), `token_expired`, `unauthorized` (401), `forbidden` (403), `bad_request` (400),
   * `no_token` (the `token` callback gave none), `closed` (`close()` was called).
   */
  reason?: string;
  /** The hub's HTTP status of a refusal. */
  status?: number;
  /** The hub's description of a refusal. */
  description?: string;
  /** Milliseconds until the next attempt, while `reconnecting` on the client's own timer. */
  retryIn?: number;
  /** The subscribed topics, once `open`. */
  topics?: string[];
}

/** A message of a subscribed topic. */
export interface Message<T = unknown> {
  /** The topic it was published on. */
  topic: string;
  /** The payload: the JSON value when it is JSON, otherwise the text. */
  payload: T;
  /** When the stream stored it, RFC 3339. */
  time: string;
  /** Its event id, `<seq>-<incarnation>`: resuming after it continues exactly. */
  id: string;
}

/** Positions the hub cannot deliver, and why (docs/OPERATIONS.md, "`gap` frames"). */
export interface Gap {
  /** The gap's event id: the position after it. */
  id: string;
  /**
   * `expired`, `ahead`, `incarnation`, `removed`, `too_large`, `replay_window`, `damaged`,
   * `unconfirmed`.
   */
  reason: string;
  /** The first and last position that cannot be delivered, when known. */
  from?: number;
  to?: number;
  /** The resume position the hub was asked for, when the gap is about it. */
  cursor?: string;
  /** For `too_large`: the topic and size of the message. */
  topic?: string;
  size?: number;
  /** `latest` when the latest message of each topic follows (`repair: "latest"`). */
  repair?: string;
}

/** A topic whose value the stream removed (a subject delete marker). */
export interface Deleted {
  id: string;
  topic: string;
  /** `max_age`, `purge`, `remove` or `other`. */
  reason: string;
  time: string;
}

/** An event of the stream as the hub sent it. */
export interface RawEvent {
  /** Its SSE event type: `connected`, the hub's `sse.event_type`, `gap`, `deleted`, `token_expired`. */
  type: string;
  /** Its event id (empty when it has none). */
  id: string;
  /** Its data: the JSON value, or the text when it is not JSON. */
  data: unknown;
}

export interface Options<T = unknown> {
  /** The topics (or wildcard filters) to subscribe to; at least one. */
  topics: string[];
  /** The hub's base URL; the page's own origin when left out. */
  hub?: string;
  /**
   * Where to start when no position is stored: `live` (the default), `earliest`, `latest`,
   * `last:<N>` or `since:<RFC 3339 time or duration>`.
   */
  from?: string;
  /**
   * A position to resume after when none is stored (an event id, or `0` for everything the
   * stream retains); it wins over `from`.
   */
  lastId?: string;
  /** What follows a gap of a lost position: `none` or `latest`. */
  repair?: "none" | "latest";
  /** The key the last delivered id is stored under; the topics when left out. */
  key?: string;
  /** Where the id is kept: `session` (the default), `local` (shared by tabs) or `none`. */
  storage?: "session" | "local" | "none";
  /** A fresh token: called before the first connection, and after an expiry or a 401. */
  token?: () => string | null | undefined | Promise<string | null | undefined>;
  /** The hub's `auth.subscribe.query_param` to carry the token in; else a cookie. */
  tokenParam?: string;
  /** The cookie that carries the token (`auth.subscribe.cookie_name`); `sluiceAuthorization`. */
  tokenCookie?: string;
  /** Send cookies to another origin's hub. */
  withCredentials?: boolean;
  /** The hub's `sse.event_type`; `message` by default. */
  eventType?: string;
  /** The first delay of the client's own retries, in ms (1000), and their cap (30000). */
  retry?: number;
  maxRetry?: number;
  onMessage?: (message: Message<T>) => void;
  onGap?: (gap: Gap) => void;
  onDeleted?: (deleted: Deleted) => void;
  onState?: (state: State, detail: StateDetail) => void;
  /** Every event as it came (`connected`, messages, `gap`, `deleted`, `token_expired`). */
  onEvent?: (event: RawEvent) => void;
}

export interface Subscription {
  /** Where the subscription is; `null` before the first connection starts. */
  readonly state: State | null;
  /** The id of the last event delivered and stored, or null. */
  readonly lastId: string | null;
  /** Stops for good; the stored id stays for the next subscription with the same key. */
  close(): void;
}

/** Subscribes and keeps the subscription going until `close()`. */
export function subscribe<T = unknown>(options: Options<T>): Subscription;
