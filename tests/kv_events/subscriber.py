"""A KV-event subscriber as a prefix-aware router writes one, for the conformance test.

It decodes vLLM's documented layout (docs/kv_events.md): multipart [topic, seq (8 bytes
big-endian), payload]; payload a msgpack array [ts, events, data_parallel_rank]; each event a
tagged array ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
medium, lora_name, ...], ["BlockRemoved", block_hashes, medium, ...], ["AllBlocksCleared"] or
the same as a map with a "type" key. It keeps the set of block hashes, and fills gaps in the
sequence numbers (it joined late, or the publisher's PUB socket dropped messages for it) from
the replay socket: request [empty frame, start seq (8 bytes big-endian)] on a DEALER, answers
[empty, seq, payload] ... then [empty, -1 (8 bytes), empty].
"""

import threading
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def fields(event):
    """(tag, dict of fields) of an array- or map-encoded event."""
    if isinstance(event, dict):
        return event["type"], event
    tag = event[0]
    names = {
        "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                        "lora_id", "medium", "lora_name"],
        "BlockRemoved": ["block_hashes", "medium"],
        "AllBlocksCleared": [],
    }[tag]
    return tag, dict(zip(names, event[1:]))


class Subscriber:
    def __init__(self, pub, replay, topic=b"", rcvhwm=None, rcvbuf=None, read=True):
        self.ctx = zmq.Context.instance()
        self.sub = self.ctx.socket(zmq.SUB)
        if rcvhwm is not None:
            self.sub.setsockopt(zmq.RCVHWM, rcvhwm)
        if rcvbuf is not None:
            self.sub.setsockopt(zmq.RCVBUF, rcvbuf)  # the kernel's buffer, before connecting
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(pub)
        self.replay_endpoint = replay
        self.topic = topic
        self.lock = threading.Lock()
        self.held = set()
        self.next_seq = 0
        self.batches = 0
        self.gaps = 0            # times a sequence gap was seen (and replayed)
        self.replayed = 0        # batches taken from the replay socket
        self.stored = []         # (hash, parent, token_ids, block_size) of every BlockStored block
        self.removed = 0
        self.cleared = 0
        self.errors = []
        self.reading = threading.Event()
        if read:
            self.reading.set()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    # --- applying -------------------------------------------------------------------------
    def _apply(self, payload):
        batch = msgpack.unpackb(payload, raw=False)
        if not (isinstance(batch, list) and len(batch) == 3 and isinstance(batch[0], float)
                and isinstance(batch[1], list)):
            self.errors.append(f"bad batch layout: {str(batch)[:200]}")
            return
        for event in batch[1]:
            tag, f = fields(event)
            if tag == "BlockStored":
                hashes, tokens, size = f["block_hashes"], f["token_ids"], f["block_size"]
                if len(tokens) != size * len(hashes):
                    self.errors.append(f"{len(hashes)} blocks carry {len(tokens)} tokens")
                parent = f["parent_block_hash"]
                if parent is not None and parent not in self.held:
                    self.errors.append(f"parent {parent} not held")
                for i, h in enumerate(hashes):
                    if h in self.held:
                        self.errors.append(f"block {h} stored twice")
                    self.held.add(h)
                    self.stored.append((h, parent, tokens[i * size:(i + 1) * size], size))
                    parent = h
            elif tag == "BlockRemoved":
                for h in f["block_hashes"]:
                    if h not in self.held:
                        self.errors.append(f"block {h} removed but not held")
                    self.held.discard(h)
                    self.removed += 1
            elif tag == "AllBlocksCleared":
                self.held.clear()
                self.cleared += 1
            else:
                self.errors.append(f"unknown event {tag}")
        self.batches += 1

    def _replay_from(self, start, upto=None):
        """Applies batches start.. from the replay socket (up to, not including, upto)."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.RCVTIMEO, 30000)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        try:
            while True:
                empty, seq_bytes, payload = dealer.recv_multipart()
                if seq_bytes == END_SEQ:
                    break
                seq = int.from_bytes(seq_bytes, "big")
                # Batches from upto on are the live stream's (the one that showed the gap and
                # later ones, which the ring already holds when this subscriber is slow): skipped
                # before the gap check, or they would read as a replay that skipped a batch.
                if upto is not None and seq >= upto:
                    continue
                if seq != self.next_seq:
                    if seq > self.next_seq:
                        self.errors.append(f"replay starts at {seq}, wanted {self.next_seq}")
                    continue
                self._apply(payload)
                self.replayed += 1
                self.next_seq = seq + 1
        finally:
            dealer.close(linger=0)

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        while not self.stop:
            if not self.reading.wait(0.05):
                continue
            if not poller.poll(50):
                continue
            topic, seq_bytes, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            with self.lock:
                if topic != self.topic:
                    self.errors.append(f"topic {topic!r}")
                if seq < self.next_seq:
                    continue  # replayed already
                if seq > self.next_seq:
                    self.gaps += 1
                    self._replay_from(self.next_seq, upto=seq)
                    if self.next_seq != seq:
                        self.errors.append(f"replay left a gap: {self.next_seq}..{seq}")
                        self.next_seq = seq
                self._apply(payload)
                self.next_seq = seq + 1

    def catch_up(self):
        """Asks the replay socket for anything after what was applied (quiescent points)."""
        with self.lock:
            self._replay_from(self.next_seq)

    def snapshot(self):
        with self.lock:
            return set(self.held)

    def close(self):
        self.stop = True
        self.reading.set()
        self.thread.join(5)
        self.sub.close(linger=0)


def wait_for(predicate, what, deadline_s=240.0):
    """Waits for a state (never for a time): polls predicate until true or the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
