@0xe5132491e4ab7dae;
# The header of every frame vessel sends. On a stream a frame is
#   u32 little-endian header_len | this message (capnp stream framing) | payloadLen payload bytes
# (docs/wire.md). The payload never lives inside the message.
#
# Evolution is additive only: new fields take new ordinals, nothing is renumbered, renamed on the
# wire, or removed. A reader treats an unknown union member as an unknown kind (a typed error).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("vessel::wire::schema");

const protocolVersion :UInt16 = 1;
# Bumped only when old peers cannot talk to new ones; a handshake refuses a mismatch.

struct Frame {
  version @0 :UInt16;
  # protocolVersion of the sender.

  seq @1 :UInt64;
  # Link sequence number of a reliable frame (data, collective, device); 0 for link control
  # frames (hello, ack, credit, heartbeat), which are never retransmitted.

  payloadLen @2 :UInt32;
  # Exact number of payload bytes that follow the header on the stream.

  hasCrc32c @3 :Bool;
  crc32c @4 :UInt32;
  # CRC32C (Castagnoli) of the payload, present on links that ask for it.

  union {
    hello @5 :Hello;
    data @6 :DataHeader;
    ack @7 :Ack;
    credit @8 :Credit;
    heartbeat @9 :Heartbeat;
    collective @10 :CollectiveStep;
    device @11 :DeviceMessage;
  }
}

struct Hello {
  # Handshake, both directions: each side sends a challenge and answers the other's with
  # HMAC-SHA256(cluster token, challenge).
  senderRank @0 :UInt32;
  worldSize @1 :UInt32;
  incarnation @2 :UInt64;
  # Increments every time a rank process restarts; peers use it to tell a restart from a reconnect.
  challenge @3 :Data;
  # 32-byte random nonce; empty when this hello only answers.
  response @4 :Data;
  # 32-byte HMAC of the peer's challenge; empty in the opening hello.
  lastSeqSeen @5 :UInt64;
  # Highest sequence number received in order from the peer, so that it resends what follows.
}

struct DataHeader {
  src @0 :UInt32;
  dst @1 :UInt32;
  tag @2 :UInt64;
  messageId @3 :UInt64;
  fragmentIndex @4 :UInt32;
  fragmentCount @5 :UInt32;
  # A message of totalLen bytes travels as fragmentCount frames; 1 when it is not split.
  totalLen @6 :UInt64;
  fragmentOffset @7 :UInt64;
  # Byte offset of this fragment's payload within the message.
}

struct Ack {
  cumulativeSeq @0 :UInt64;
  # Every frame with seq <= cumulativeSeq was received.
  closing @1 :Bool;
  # The sender ends in order: every frame it sent was acked, it acked every frame it received,
  # and it sends no more data. Its peer may close once it can say the same.
}

struct Credit {
  bytes @0 :UInt64;
  # Additional payload bytes the receiver grants the sender.
}

struct Heartbeat {
  sendTimeNs @0 :UInt64;
  echoTimeNs @1 :UInt64;
  # sendTimeNs of the last heartbeat received from the peer, 0 if none: the peer measures RTT.
}

struct CollectiveStep {
  communicator @0 :UInt64;
  operation @1 :UInt64;
  # Sequence number of the collective on its communicator.
  step @2 :UInt32;
  chunkIndex @3 :UInt32;
}

struct DeviceMessage {
  deviceId @0 :UInt32;
  kind @1 :UInt16;
  requestId @2 :UInt64;
  # Pairs a reply with its request; 0 for unsolicited frames.
}
