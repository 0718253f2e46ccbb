// The TypeScript MCP client 2.x with the Tasks extension (@modelcontextprotocol/ext-tasks),
// run by tests/test_ts_tasks_client.py against the wrapped stock MCPServer app.
//
//   node client.mjs <url> [--trace trace.jsonl] [--slow-seconds 0.6]
//
// Connects with versionNegotiation auto (the server answers server/discover, so 2026-07-28),
// wraps the Client in ext-tasks' createTaskSessionFromClient, then:
//   1. calls `slow` (a task at once on the server side), follows it to its result;
//   2. calls `confirm`, whose task becomes input_required with an elicitation/create; the
//      client's elicitation handler answers it and ext-tasks sends it with tasks/update;
//   3. calls `slow` for 30 s and cancels it (tasks/cancel), settling as cancelled.
// Prints one JSON summary line on stdout (last line starting with "{").
//
// ext-tasks needs a host "raw dispatch" for V2 task traffic (the SDK's result codecs reject
// resultType "task", see ext-tasks README "Adapters and schemas"): rawDispatch below POSTs one
// JSON-RPC request per HTTP request, with the 2026-07-28 standard headers, and reads its
// JSON or SSE answer. Every HTTP exchange - the SDK transport's and the raw dispatch's - goes
// through one tracing fetch, so the summary lists the JSON-RPC methods sent on the wire.

import { readFileSync, appendFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createApplicationInputHandler,
  createTaskSessionFromClient,
  resultFromTaskOutcome,
  DispatchError,
} from "@modelcontextprotocol/ext-tasks/client";

const HERE = dirname(fileURLToPath(import.meta.url));
const versionOf = (name) =>
  JSON.parse(readFileSync(join(HERE, "node_modules", name, "package.json"), "utf8")).version;

function parseArgs(argv) {
  const args = { url: argv[0], trace: undefined, slowSeconds: 0.6 };
  for (let i = 1; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (key === "--trace") args.trace = value;
    else if (key === "--slow-seconds") args.slowSeconds = Number(value);
    else throw new Error(`unknown argument ${key}`);
  }
  if (!args.url) throw new Error("usage: node client.mjs <url> [--trace file] [--slow-seconds s]");
  return args;
}

const args = parseArgs(process.argv.slice(2));
const summary = {
  ok: false,
  node: process.version,
  sdkVersion: versionOf("@modelcontextprotocol/client"),
  extTasksVersion: versionOf("@modelcontextprotocol/ext-tasks"),
  protocolVersion: null,
  era: null,
  serverTasksExtension: null,
  sessionCapabilities: null,
  wire: [], // every JSON-RPC message the client POSTed: {method, id, via, mcpMethod, mcpName, status}
  rawAnswers: [], // what rawDispatch got back: {method, resultType, status, taskId, error}
  elicitations: [], // the elicitation handler's calls: {via, message}
  updates: [], // the params of every tasks/update sent
  calls: {},
  error: null,
};
if (args.trace) writeFileSync(args.trace, "");
const trace = (record) => {
  if (args.trace) appendFileSync(args.trace, JSON.stringify(record) + "\n");
};

function headerValue(headers, name) {
  if (!headers) return undefined;
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value;
  return undefined;
}

// One fetch for everything, recording each JSON-RPC message the client sends.
let via = "sdk";
async function tracingFetch(input, init = {}) {
  const sentBy = via;
  let messages = [];
  if (typeof init.body === "string") {
    try {
      const parsed = JSON.parse(init.body);
      messages = Array.isArray(parsed) ? parsed : [parsed];
    } catch {
      messages = [];
    }
  }
  const response = await fetch(input, init);
  for (const message of messages) {
    const entry = {
      method: message.method ?? (message.result !== undefined ? "(response)" : "(error response)"),
      id: message.id ?? null,
      via: sentBy,
      mcpMethod: headerValue(init.headers, "mcp-method") ?? null,
      mcpName: headerValue(init.headers, "mcp-name") ?? null,
      status: response.status,
    };
    summary.wire.push(entry);
    if (message.method === "tasks/update") summary.updates.push(message.params);
    trace({ sent: message, headers: init.headers instanceof Headers ? Object.fromEntries(init.headers) : init.headers, status: response.status });
  }
  if (messages.length === 0) trace({ http: init.method ?? "GET", url: String(input), status: response.status });
  return response;
}

function encodeName(value) {
  // 2026-07-28 transport: a value that is not plain printable ASCII goes Base64 in a sentinel.
  return /^[\x20-\x7e]*$/.test(value) && value.trim() === value
    ? value
    : `=?base64?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

function sseMessages(text) {
  const out = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""))
      .join("\n");
    if (data) {
      try {
        out.push(JSON.parse(data));
      } catch {
        // a priming or non-JSON event
      }
    }
  }
  return out;
}

// The host-owned request coordinator ext-tasks asks for (rawDispatch): request ids of its own
// ("ext-tasks-N", never colliding with the SDK's numbers), one POST per request, the answer
// matched by id in the POST's own response (JSON or SSE).
let rawIds = 0;
function makeRawDispatch(url, protocolVersion) {
  return async (request, options = {}) => {
    const id = `ext-tasks-${++rawIds}`;
    const body = { jsonrpc: "2.0", id, ...request };
    const headers = {
      accept: "application/json, text/event-stream",
      "content-type": "application/json",
      "mcp-protocol-version": protocolVersion,
      "mcp-method": request.method,
    };
    for (const [key, value] of Object.entries(options.context?.headers ?? {}))
      if (value !== undefined) headers[key.toLowerCase()] = value;
    if (request.method === "tools/call" && headers["mcp-name"] === undefined)
      headers["mcp-name"] = encodeName(request.params.name);
    let response;
    via = "rawDispatch";
    try {
      response = await tracingFetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        ...(options.signal ? { signal: options.signal } : {}),
      });
    } catch (error) {
      throw new DispatchError(`POST ${request.method} failed: ${error}`, true, { cause: error });
    } finally {
      via = "sdk";
    }
    const text = await response.text();
    const type = response.headers.get("content-type") ?? "";
    let messages = [];
    if (type.includes("text/event-stream")) messages = sseMessages(text);
    else if (text) {
      try {
        messages = [JSON.parse(text)];
      } catch {
        messages = [];
      }
    }
    trace({ received: messages, status: response.status, for: id });
    const answer = messages.find((m) => m && m.id === id && (m.result !== undefined || m.error !== undefined));
    if (answer === undefined)
      throw new DispatchError(`no JSON-RPC answer to ${request.method} (HTTP ${response.status}): ${text.slice(0, 300)}`);
    const record = { method: request.method, status: response.status };
    if (answer.error !== undefined) {
      summary.rawAnswers.push({ ...record, error: answer.error });
      return { kind: "error", error: answer.error };
    }
    const result = answer.result;
    summary.rawAnswers.push({
      ...record,
      resultType: result.resultType ?? null,
      taskStatus: result.status ?? null,
      taskId: result.taskId ?? null,
      ...(result.inputRequests ? { inputRequestKeys: Object.keys(result.inputRequests) } : {}),
    });
    return { kind: "result", result };
  };
}

// The client's one elicitation handler: the SDK's own (setRequestHandler) and ext-tasks'
// (onInputRequest) both answer through it.
function answerElicitation(params, how) {
  summary.elicitations.push({ via: how, message: params.message });
  if (/^Delete /.test(params.message ?? "")) return { action: "accept", content: { confirm: true } };
  return { action: "decline" };
}

function textOf(result) {
  return (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

async function follow(session, name, toolArgs) {
  const record = { kind: null, taskId: null, statuses: [], events: [], outcome: null, text: null, isError: null };
  summary.calls[name] = record;
  const execution = await session.callTool(name, toolArgs);
  record.kind = execution.kind;
  if (execution.kind === "task") record.taskId = execution.handle.taskId;
  const iterate = (async () => {
    for await (const event of execution.updates()) {
      if (event.type === "task") {
        record.events.push(event.task.status);
        if (record.statuses.at(-1) !== event.task.status) record.statuses.push(event.task.status);
      } else record.events.push(`outcome:${event.outcome.status}`);
    }
  })();
  const { outcome } = await execution.settle();
  await iterate.catch((error) => record.events.push(`updates error: ${error}`));
  record.outcome = outcome.status;
  if (outcome.status === "completed") {
    const result = resultFromTaskOutcome(outcome);
    record.text = textOf(result);
    record.isError = result.isError ?? false;
  } else if (outcome.status === "failed") record.error = String(outcome.error?.message ?? outcome.error);
  return record;
}

// A long task cancelled by the client (ext-tasks sends tasks/cancel, then sees it cancelled).
async function cancelOne(session) {
  const record = { kind: null, taskId: null, outcome: null, cancelAcknowledged: false };
  summary.calls.cancelled = record;
  const execution = await session.callTool("slow", { seconds: 30, tag: "ts-tasks-cancel" });
  record.kind = execution.kind;
  if (execution.kind !== "task") return record;
  record.taskId = execution.handle.taskId;
  await new Promise((resolve) => setTimeout(resolve, 300));
  await execution.cancel();
  record.cancelAcknowledged = true;
  const { outcome } = await execution.settle();
  record.outcome = outcome.status;
  return record;
}

async function main() {
  const url = new URL(args.url);
  const client = new Client(
    { name: "mcp-resume-asgi-ts-tasks-client", version: "0.0.0" },
    { versionNegotiation: { mode: "auto" }, capabilities: { elicitation: {} } },
  );
  client.setRequestHandler("elicitation/create", async (request) => answerElicitation(request.params, "sdk"));
  await client.connect(new StreamableHTTPClientTransport(url, { fetch: tracingFetch }));
  summary.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
  summary.era = client.getProtocolEra();
  summary.serverTasksExtension = client.getServerCapabilities()?.extensions?.["io.modelcontextprotocol/tasks"] ?? null;
  const session = createTaskSessionFromClient(client, {
    endpointId: `mcp-resume-asgi-test:${url.host}`,
    rawDispatch: makeRawDispatch(url, summary.protocolVersion),
    v2RequestFraming: {
      protocolVersion: summary.protocolVersion,
      clientInfo: { name: "mcp-resume-asgi-ts-tasks-client", version: "0.0.0" },
      clientCapabilities: { elicitation: {} },
    },
    onInputRequest: createApplicationInputHandler({
      elicitation: (request) => answerElicitation(request.params, "ext-tasks"),
      sampling: () => {
        throw new Error("no sampling here");
      },
      roots: () => ({ roots: [] }),
    }),
    onError: (error) => {
      summary.backgroundErrors = [...(summary.backgroundErrors ?? []), String(error)];
    },
  });
  summary.sessionCapabilities = session.capabilities ?? null;
  try {
    await follow(session, "slow", { seconds: args.slowSeconds, tag: "ts-tasks" });
    await follow(session, "confirm", { filename: "ts.txt" });
    await cancelOne(session);
  } finally {
    await session.close();
    await client.close();
  }
  summary.ok = true;
}

try {
  await main();
} catch (error) {
  summary.error = `${error?.name ?? "Error"}: ${error?.message ?? error}${error?.cause ? ` (cause: ${error.cause})` : ""}`;
  trace({ error: summary.error, stack: error?.stack });
}
console.log(JSON.stringify(summary));
process.exit(summary.ok ? 0 : 1);
