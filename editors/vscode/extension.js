// The shd extension's language client: starts `shdc lsp` (the setting
// shd.server.path, default `shdc` on PATH) for .shd files and talks the
// Language Server Protocol with it over stdio, through Microsoft's
// vscode-languageclient (package.json: dependencies; `npm install
// --omit=dev` in this directory fetches it). The server gives the
// diagnostics of `shdc check` with their fixes as quick fixes, the type of
// what is under the cursor, go to definition and the outline.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

let client;

function serverOptions() {
  const config = vscode.workspace.getConfiguration('shd');
  const command = config.get('server.path') || 'shdc';
  const run = { command, args: ['lsp'], transport: TransportKind.stdio };
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
