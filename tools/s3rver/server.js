// Skiff's S3 emulator process for tests: @20minutes/s3rver bound to loopback,
// verifying SigV4 signatures, with fixed credentials S3RVER/S3RVER.
// usage: node server.js DATADIR PORT BUCKET...
// Prints "ready <port>" on stdout once it accepts connections; exits on
// SIGTERM/SIGINT after closing the listener, and, when the environment names
// an owner (SKIFF_S3RVER_OWNER_PID, a test program), once that process is
// gone: a test that crashes leaves no server behind.
'use strict';

const S3rver = require('@20minutes/s3rver');

const [dir, portArg, ...buckets] = process.argv.slice(2);
const port = Number(portArg);
if (!dir || !Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node server.js DATADIR PORT BUCKET...');
  process.exit(2);
}

const server = new S3rver({
  address: '127.0.0.1',
  port,
  directory: dir,
  silent: true,
  allowMismatchedSignatures: false,
  configureBuckets: buckets.map((name) => ({ name, configs: [] })),
});

server.run().then(
  (addr) => console.log(`ready ${addr.port}`),
  (err) => {
    console.error(`s3rver failed to start: ${err.message}`);
    process.exit(1);
  },
);

function stop() {
  server.close().then(
    () => process.exit(0),
    () => process.exit(0),
  );
  // A client holding a keep-alive connection must not keep us alive.
  setTimeout(() => process.exit(0), 1000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

const owner = Number(process.env.SKIFF_S3RVER_OWNER_PID || 0);
if (owner > 0) {
  setInterval(() => {
    try {
      process.kill(owner, 0);
    } catch (e) {
      if (e.code === 'ESRCH') stop();
    }
  }, 1000).unref();
}
