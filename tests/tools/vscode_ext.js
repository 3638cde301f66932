// Loads editors/vscode/extension.js with stand-ins for the modules VS Code
// provides (`vscode`, `vscode-languageclient/node`), activates it as VS Code
// would for a .shd file, and prints what it did as JSON: the client's id,
// name, server options and document selector, whether it was started and
// stopped. Then it runs the server command the client was given (with
// shd.server.path set to argv[3], shd.importPaths to [EXTENSION_DIR]) and sends initialize, shutdown and exit
// over stdio, printing the server's answers: the extension and the server
// fit. Usage: node vscode_ext.js EXTENSION_DIR SHDC
'use strict';
const Module = require('module');
const path = require('path');
const { spawnSync } = require('child_process');

const extDir = process.argv[2];
const shdc = process.argv[3];
const log = { clients: [] };
let setting;
let importPaths;

class LanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    this.record = { id, name, serverOptions, clientOptions, started: false, stopped: false };
    log.clients.push(this.record);
  }
  start() { this.record.started = true; return Promise.resolve(); }
  stop() { this.record.stopped = true; return Promise.resolve(); }
}

const stubs = {
  'vscode': {
    workspace: {
      getConfiguration: (section) => ({
        get: (key) => (section !== 'shd' ? undefined : key === 'server.path' ? setting : key === 'importPaths' ? importPaths : undefined),
      }),
    },
  },
  'vscode-languageclient/node': { LanguageClient, TransportKind: { stdio: 0, ipc: 1, pipe: 2, socket: 3 } },
};
const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (Object.prototype.hasOwnProperty.call(stubs, request)) return stubs[request];
  return load.apply(this, arguments);
};

function frame(obj) {
  const b = Buffer.from(JSON.stringify(obj));
  return Buffer.concat([Buffer.from('Content-Length: ' + b.length + '\r\n\r\n'), b]);
}

(async () => {
  const ext = require(path.join(extDir, require(path.join(extDir, 'package.json')).main));
  const context = { subscriptions: [] };
  await ext.activate(context);                 // default: shdc on PATH
  await ext.deactivate();
  setting = shdc;                              // shd.server.path
  importPaths = [extDir];                      // shd.importPaths: -I DIR
  await ext.activate(context);
  const opts = log.clients[1].serverOptions.run;
  const input = Buffer.concat([
    frame({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { capabilities: {} } }),
    frame({ jsonrpc: '2.0', id: 2, method: 'shutdown' }),
    frame({ jsonrpc: '2.0', method: 'exit' })]);
  const run = spawnSync(opts.command, opts.args, { input, timeout: 60000 });
  log.server = { status: run.status, stdout: run.stdout ? run.stdout.toString() : '', error: String(run.error || '') };
  for (const d of context.subscriptions) await d.dispose();
  log.subscriptions = context.subscriptions.length;
  console.log(JSON.stringify(log));
})().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
