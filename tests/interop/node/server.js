"use strict";
// Interop test server: the real Node socket.io 4.8 with connection-state recovery (CSR) on.
//
// Usage: node server.js <port|0> <maxDisconnectionDuration ms> [token]
//   The token may also come from $INTEROP_TOKEN (argv wins); the default is "interop-token".
//
// stdout protocol (one line each, read by tests/interop/conftest.py):
//   LISTENING <port>                   always the first line
//   CONNECTION <sid> <recovered>       a namespace "/" connection (recovered: true|false)
//   DISCONNECT <sid> <reason...>       the server-side disconnect reason of a socket
//   ACKED <event> <json>               the client's reply to a server emit with an ack
//
// Test-control events (client -> server):
//   burst n                 emit n events "b" (i, "item-<i>") to the sender
//   kill {gap}              drop the transport abruptly, then emit `gap` events "gap" (i)
//                           to the sender's sid while it is disconnected
//   server_disconnect       socket.disconnect(true): a non-recoverable, server-side end
//   probe_special [spec]    a volatile emit "vol", an emit "with_ack" with an ack (the reply
//                           is echoed as "with_ack_reply" [reply...]) and a plain emit
//                           "plain"; spec {volatile, ack, plain} overrides the arguments
//   volatile ...args        one volatile emit "vol" (...args)
//   stats (ack)             -> {recovered, id}
//
// Lifetime: exits when stdin closes (the test process went away) or after 10 minutes.

const http = require("node:http");
const { Server } = require("socket.io");

const PORT = Number.parseInt(process.argv[2] ?? "0", 10);
const WINDOW_MS = Number.parseInt(process.argv[3] ?? "20000", 10);
const TOKEN = process.argv[4] ?? process.env.INTEROP_TOKEN ?? "interop-token";
const MAX_LIFETIME_MS = 10 * 60 * 1000;

if (!Number.isInteger(PORT) || PORT < 0 || !Number.isInteger(WINDOW_MS) || WINDOW_MS <= 0) {
  process.stderr.write("usage: node server.js <port|0> <window_ms> [token]\n");
  process.exit(2);
}

function line(...parts) {
  process.stdout.write(parts.join(" ") + "\n");
}

// Calls fn as soon as the socket's transport can write (bounded: about 2 s).
function whenWritable(socket, fn, tries = 400) {
  if (!socket.connected) return;
  if (socket.conn.transport.writable) fn();
  else if (tries > 0) setTimeout(() => whenWritable(socket, fn, tries - 1), 5);
}

const httpServer = http.createServer();
const io = new Server(httpServer, {
  serveClient: false,
  connectionStateRecovery: { maxDisconnectionDuration: WINDOW_MS, skipMiddlewares: true },
});

io.use((socket, next) => {
  const auth = socket.handshake.auth ?? {};
  if (auth.token !== TOKEN) {
    next(new Error("invalid token"));
    return;
  }
  next();
});

io.on("connection", (socket) => {
  line("CONNECTION", socket.id, String(socket.recovered));
  socket.on("disconnect", (reason) => line("DISCONNECT", socket.id, reason));

  // Like the production backend: the first event, so the client holds an offset at once.
  socket.emit("onServerConnected", {});

  socket.on("burst", (n) => {
    const count = Number.isInteger(n) && n > 0 ? n : 0;
    for (let i = 0; i < count; i++) socket.emit("b", i, `item-${i}`);
  });

  socket.on("kill", (opts) => {
    const gap = Number.isInteger(opts?.gap) && opts.gap > 0 ? opts.gap : 0;
    const sid = socket.id;
    socket.conn.close(); // abrupt: no Socket.IO DISCONNECT packet, reason "forced close"
    // The socket is gone now; with CSR these are stored and replayed on recovery.
    for (let i = 0; i < gap; i++) io.to(sid).emit("gap", i);
  });

  socket.on("server_disconnect", () => socket.disconnect(true));

  socket.on("probe_special", (spec) => {
    const s = spec && typeof spec === "object" ? spec : {};
    const ackArgs = Array.isArray(s.ack) ? s.ack : ["a-string", "a-tail"];
    const volatileArgs = Array.isArray(s.volatile) ? s.volatile : ["v-string"];
    const plainArgs = Array.isArray(s.plain) ? s.plain : ["p-string", "p-tail"];
    // A volatile packet is dropped while the transport is busy writing: send it first, once
    // the transport is writable, so that it is delivered; then the other two, in order.
    whenWritable(socket, () => {
      socket.volatile.emit("vol", ...volatileArgs);
      socket.emit("with_ack", ...ackArgs, (...reply) => {
        line("ACKED", "with_ack", JSON.stringify(reply));
        socket.emit("with_ack_reply", reply);
      });
      socket.emit("plain", ...plainArgs);
    });
  });

  socket.on("volatile", (...args) => {
    whenWritable(socket, () => socket.volatile.emit("vol", ...args));
  });

  socket.on("stats", (ack) => {
    if (typeof ack === "function") ack({ recovered: socket.recovered, id: socket.id });
  });
});

function shutdown(code) {
  io.close();
  process.exit(code);
}

httpServer.on("error", (err) => {
  process.stderr.write(`server error: ${err.message}\n`);
  process.exit(1);
});

httpServer.listen(PORT, "127.0.0.1", () => {
  line("LISTENING", httpServer.address().port);
});

setTimeout(() => shutdown(0), MAX_LIFETIME_MS).unref();
process.stdin.on("end", () => shutdown(0));
process.stdin.on("error", () => shutdown(0));
process.stdin.resume();
