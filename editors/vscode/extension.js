// The shd extension's language client: starts `shdc lsp` (the setting
// shd.server.path, default `shdc` on PATH; -I for each of shd.importPaths) for .shd files and talks the
// Language Server Protocol with it over stdio, through Microsoft's
// vscode-languageclient (package.json: dependencies; `npm install
// --omit=dev` in this directory fetches it). The server gives the
// diagnostics of `shdc check` with their fixes as quick fixes, the type of
// what is under the cursor, go to definition and the outline.
'use strict';

const path = require('path');
const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

let client;

// shd.importPaths: the -I directories of the server (where `import` looks
// after the importing file's directory, as `shdc check -I DIR` does); a
// relative one is taken from the first workspace folder.
function importArgs(config) {
  const dirs = config.get('importPaths');
  const folders = vscode.workspace.workspaceFolders;
  const base = folders && folders.length ? folders[0].uri.fsPath : undefined;
  const args = [];
  for (const d of Array.isArray(dirs) ? dirs : []) {
    if (typeof d !== 'string' || !d) continue;
    args.push('-I', base && !path.isAbsolute(d) ? path.join(base, d) : d);
  }
  return args;
}

function serverOptions() {
  const config = vscode.workspace.getConfiguration('shd');
  const command = config.get('server.path') || 'shdc';
  const run = { command, args: ['lsp'].concat(importArgs(config)), transport: TransportKind.stdio };
  return { run, debug: run };
}

function activate(context) {
  const clientOptions = {
    documentSelector: [{ scheme: 'file', language: 'shd' }, { scheme: 'untitled', language: 'shd' }],
  };
  client = new LanguageClient('shd', 'shdc language server', serverOptions(), clientOptions);
  context.subscriptions.push({ dispose: () => (client ? client.stop() : undefined) });
  return client.start();
}

function deactivate() {
  const c = client;
  client = undefined;
  return c ? c.stop() : undefined;
}

module.exports = { activate, deactivate };
