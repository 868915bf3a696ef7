// Compiled by `tsc --noEmit` (scripts/test): the types describe how the library is used.
import { subscribe, type Message, type State, type StateDetail, type RawEvent } from "./sluice.js";

interface Order {
  id: number;
}

const subscription = subscribe<Order>({
  topics: ["orders.*"],
  from: "latest",
  repair: "latest",
  storage: "local",
  token: async () => "a token",
  onMessage: (message: Message<Order>) => console.log(message.topic, message.payload.id, message.id),
  onGap: (gap) => console.log(gap.reason, gap.from, gap.to),
  onDeleted: (deleted) => console.log(deleted.topic, deleted.reason),
  onState: (state: State, detail: StateDetail) => console.log(state, detail.reason, detail.retryIn),
});
// A console: every event as it came, from a position given by hand.
subscribe({
  topics: [">"],
  lastId: "41-18c3f0a1b2",
  storage: "none",
  onEvent: (event: RawEvent) => console.log(event.type, event.id, event.data),
});
const where: State | null = subscription.state;
const last: string | null = subscription.lastId;
console.log(where, last);
subscription.close();
