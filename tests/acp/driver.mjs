// A scripted ACP v1 client for the tests: spawns the agent command given
// after `--`, drives it with the official SDK (@agentclientprotocol/sdk
// 2.4.0: its stable `client()` app over `ndJsonStream`; 2.x has no
// ClientSideConnection any more), and is itself driven by the test over its
// own stdin/stdout, one JSON object per line.
//
//   node tests/acp/driver.mjs -- moonkale-service acp --workspace DIR
//
// Packages come from $MOONKALE_ACP_NODE_MODULES, else from
// <repo>/.peers/acp/node_modules (scripts/install-test-peers.sh), loaded
// with createRequire so that nothing needs installing next to this file.
//
// Commands in (stdin):
//   {"id":1,"call":"initialize","params":{...}}      -> {"reply":1,"result":...}
//     call: initialize, authenticate, newSession, loadSession, listSessions,
//     resumeSession, closeSession, deleteSession, prompt, setSessionMode,
//     setSessionConfigOption, or any method name ("session/list", "_x/y").
//     A failed call:                                  -> {"reply":1,"error":{"code","message","data"?}}
//   {"id":2,"notify":"cancel","params":{...}}         (session/cancel; or a method name)
//   {"id":3,"answer":KEY,"outcome":{"outcome":"selected","optionId":"allow"}}
//     answers the held session/request_permission whose key is KEY
//   {"id":4,"call":"raw","line":"..."}                writes the line to the agent as it is
//     (not validated); a response whose id matches the line's id, or whose id
//     is null, comes back as {"raw":4,"line":"..."} (null when no raw id matched)
//   Every notify/answer/raw command is acknowledged with {"reply":id,"result":null}.
//
// Events out (stdout):
//   {"update":<session/update params, as sent>}
//   {"permission":KEY,"params":<session/request_permission params, as sent>}
//     KEY is the JSON-RPC id of the agent's request; it is held until answered
//   {"cancelled_request":KEY} the agent sent $/cancel_request for it (the SDK
//     then answers it with -32800 and the key is gone)
//   {"invalid":{"direction":"agent->client"|"client->agent","message":...,"errors":[...]}}
//     a wire message that does not validate against the ACP v1 JSON schema
//   {"validated":N,"invalid":M} then {"exit":code|null,"signal":name|null} when the agent exits
//
// Closing the driver's stdin closes the agent's stdin; the agent is killed
// if it has not exited 5 s later. The agent's stderr goes to ours; our
// stdout carries nothing but events.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

console.log = console.info = console.debug = console.warn = console.error;

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules =
    process.env.MOONKALE_ACP_NODE_MODULES || path.join(here, "..", "..", ".peers", "acp", "node_modules");
const require = createRequire(path.join(nodeModules, "moonkale-acp-driver.js"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;
const acpSchema = require("@agentclientprotocol/sdk/schema/v1/schema.json");

const dash = process.argv.indexOf("--");
const argv = dash < 0 ? [] : process.argv.slice(dash + 1);
if (argv.length === 0) {
    console.error("usage: node driver.mjs -- AGENT [ARGS...]");
    process.exit(2);
}

function emit(event) {
    process.stdout.write(JSON.stringify(event) + "\n");
}

// ---- schema validation -------------------------------------------------

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
for (const [name, max] of [["uint16", 2 ** 16 - 1], ["uint32", 2 ** 32 - 1], ["uint64", Number.MAX_SAFE_INTEGER]]) {
    ajv.addFormat(name, { type: "number", validate: (n) => Number.isInteger(n) && n >= 0 && n <= max });
}
ajv.addSchema(acpSchema, "acp");
const defValidator = new Map();
function validatorFor(def) {
    if (!defValidator.has(def)) defValidator.set(def, ajv.getSchema(`acp#/$defs/${def}`));
    return defValidator.get(def);
}

// The schema's per-method definitions carry x-method and x-side (the side
// that handles the method: "agent", "client", or "protocol" for both):
// index them by direction, kind and method.
const defsByMethod = { request: new Map(), response: new Map(), notification: new Map() };
for (const [name, def] of Object.entries(acpSchema.$defs)) {
    if (!def["x-method"]) continue;
    const kind = name.endsWith("Request") ? "request" : name.endsWith("Response") ? "response" : "notification";
    const sides = def["x-side"] === "protocol" ? ["agent", "client"] : [def["x-side"]];
    for (const side of sides) defsByMethod[kind].set(`${side} ${def["x-method"]}`, name);
}

const AGENT_TO_CLIENT = "agent->client";
const CLIENT_TO_AGENT = "client->agent";
// Requests in flight, by direction of the request, keyed by JSON id: method.
const pending = { [AGENT_TO_CLIENT]: new Map(), [CLIENT_TO_AGENT]: new Map() };
let validated = 0;
let invalidCount = 0;

function check(def, value, where, errors) {
    const validate = validatorFor(def);
    if (!validate(value)) {
        for (const e of validate.errors) errors.push({ at: where + e.instancePath, def, error: e.message, params: e.params });
    }
}

// Returns the list of schema errors of one parsed wire message.
function schemaErrors(direction, m) {
    const errors = [];
    if (m === null || typeof m !== "object" || Array.isArray(m)) {
        return [{ error: "not a JSON-RPC object (ACP has no batches)" }];
    }
    if (m.jsonrpc !== "2.0") errors.push({ at: "/jsonrpc", error: 'must be "2.0"' });
    const handler = direction === AGENT_TO_CLIENT ? "client" : "agent";
    const hasId = Object.hasOwn(m, "id");
    if (typeof m.method === "string") {
        const kind = hasId ? "request" : "notification";
        if (hasId) check("RequestId", m.id, "/id", errors);
        const def = defsByMethod[kind].get(`${handler} ${m.method}`);
        if (def) {
            check(def, m.params, "/params", errors);
        } else if (m.method.startsWith("_")) {
            if (m.params !== undefined && (m.params === null || typeof m.params !== "object")) {
                errors.push({ at: "/params", error: "extension params must be an object" });
            }
        } else {
            errors.push({ at: "/method", error: `not an ACP v1 ${kind} handled by the ${handler}: ${m.method}` });
        }
        if (hasId) pending[direction].set(JSON.stringify(m.id), m.method);
    } else if (Object.hasOwn(m, "method")) {
        errors.push({ at: "/method", error: "must be a string" });
    } else if (hasId) {
        // A response answers a request that went the other way.
        const other = direction === AGENT_TO_CLIENT ? CLIENT_TO_AGENT : AGENT_TO_CLIENT;
        const key = JSON.stringify(m.id);
        const method = pending[other].get(key);
        pending[other].delete(key);
        if (m.id !== null) check("RequestId", m.id, "/id", errors);
        const hasResult = Object.hasOwn(m, "result");
        const hasError = Object.hasOwn(m, "error");
        if (hasResult === hasError) {
            errors.push({ error: "a response has exactly one of result and error" });
        } else if (hasError) {
            check("Error", m.error, "/error", errors);
        } else if (method === undefined) {
            errors.push({ at: "/id", error: "result for no request in flight" });
        } else {
            const def = defsByMethod.response.get(`${handler === "agent" ? "client" : "agent"} ${method}`);
            if (def) check(def, m.result, "/result", errors);
        }
    } else {
        errors.push({ error: "neither a request, a notification nor a response" });
    }
    return errors;
}

// Validates one wire line; returns the parsed message, or undefined.
function tap(direction, line) {
    validated += 1;
    let message;
    try {
        message = JSON.parse(line);
    } catch (e) {
        invalidCount += 1;
        emit({ invalid: { direction, message: line, errors: [{ error: `not JSON: ${e.message}` }] } });
        return undefined;
    }
    const errors = schemaErrors(direction, message);
    if (errors.length) {
        invalidCount += 1;
        // A failed anyOf lists every branch's errors: the first 20 say enough.
        emit({ invalid: { direction, message, errors: errors.slice(0, 20) } });
    }
    return message;
}

// Splits a byte stream into lines; calls onLine for each non-blank one.
function lineSplitter(onLine) {
    let buffered = "";
    const decoder = new TextDecoder();
    return {
        push(chunk) {
            buffered += decoder.decode(chunk, { stream: true });
            let nl;
            while ((nl = buffered.indexOf("\n")) >= 0) {
                const line = buffered.slice(0, nl).replace(/\r$/, "");
                buffered = buffered.slice(nl + 1);
                if (line.trim()) onLine(line);
            }
        },
        end() {
            if (buffered.trim()) onLine(buffered);
            buffered = "";
        },
    };
}

// ---- the agent and its wire ---------------------------------------------

const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
child.stdin.on("error", () => {}); // EPIPE once the agent is gone: its exit is reported

const rawIds = new Map(); // JSON id of a raw request -> the raw command's id
const rawPermissionParams = new Map(); // JSON id of a permission request -> params as sent

const encoder = new TextEncoder();
let toSdk;
const agentOutput = new ReadableStream({
    start(controller) {
        toSdk = controller;
    },
});
const fromAgent = lineSplitter((line) => {
    const message = tap(AGENT_TO_CLIENT, line);
    if (message && typeof message === "object" && !Array.isArray(message)) {
        const isResponse = !Object.hasOwn(message, "method") && Object.hasOwn(message, "id");
        if (isResponse && (message.id === null || rawIds.has(JSON.stringify(message.id)))) {
            const key = JSON.stringify(message.id);
            emit({ raw: message.id === null ? null : rawIds.get(key), line });
            rawIds.delete(key);
            return; // not the SDK's
        }
        if (message.method === "session/update" && !Object.hasOwn(message, "id")) {
            emit({ update: message.params });
        }
        if (message.method === "session/request_permission" && Object.hasOwn(message, "id")) {
            rawPermissionParams.set(JSON.stringify(message.id), message.params);
        }
    }
    toSdk.enqueue(encoder.encode(line + "\n"));
});
child.stdout.on("data", (chunk) => fromAgent.push(chunk));
child.stdout.on("end", () => {
    fromAgent.end();
    try {
        toSdk.close();
    } catch {}
});

const toAgentLines = lineSplitter((line) => tap(CLIENT_TO_AGENT, line));
function writeToAgent(bytes) {
    return new Promise((resolve) => {
        if (child.stdin.destroyed || child.stdin.writableEnded) return resolve();
        child.stdin.write(bytes, () => resolve());
    });
}
const agentInput = new WritableStream({
    async write(chunk) {
        toAgentLines.push(chunk);
        await writeToAgent(chunk);
    },
});

// ---- the SDK client -----------------------------------------------------

const held = new Map(); // JSON key of a permission request -> {resolve}

const app = acp
    .client({ name: "moonkale-acp-driver" })
    .onNotification("session/update", () => {})
    .onRequest("session/request_permission", (ctx) => {
        const key = ctx.requestId;
        const jsonKey = JSON.stringify(key);
        const params = rawPermissionParams.get(jsonKey) ?? ctx.params;
        rawPermissionParams.delete(jsonKey);
        return new Promise((resolve, reject) => {
            held.set(jsonKey, { resolve });
            ctx.signal.addEventListener("abort", () => {
                if (!held.delete(jsonKey)) return;
                emit({ cancelled_request: key });
                reject(ctx.signal.reason);
            });
            emit({ permission: key, params });
        });
    });
const connection = app.connect(acp.ndJsonStream(agentInput, agentOutput));

const CALLS = {
    initialize: "initialize",
    authenticate: "authenticate",
    newSession: "session/new",
    loadSession: "session/load",
    listSessions: "session/list",
    resumeSession: "session/resume",
    closeSession: "session/close",
    deleteSession: "session/delete",
    prompt: "session/prompt",
    setSessionMode: "session/set_mode",
    setSessionConfigOption: "session/set_config_option",
};
const NOTIFICATIONS = { cancel: "session/cancel" };

function errorObject(e) {
    if (e && typeof e === "object" && typeof e.code === "number") {
        const error = { code: e.code, message: String(e.message) };
        if (e.data !== undefined) error.data = e.data;
        return error;
    }
    return { code: -32603, message: String(e?.message ?? e) };
}

async function run(command) {
    const { id } = command;
    try {
        if (command.call === "raw") {
            try {
                const parsed = JSON.parse(command.line);
                if (parsed && typeof parsed === "object" && Object.hasOwn(parsed, "id") && parsed.id !== null) {
                    rawIds.set(JSON.stringify(parsed.id), id);
                    if (typeof parsed.method === "string") {
                        pending[CLIENT_TO_AGENT].set(JSON.stringify(parsed.id), parsed.method);
                    }
                }
            } catch {}
            await writeToAgent(command.line + "\n");
            emit({ reply: id, result: null });
        } else if (typeof command.call === "string") {
            const method = CALLS[command.call] ?? command.call;
            const result = await connection.agent.request(method, command.params ?? {});
            emit({ reply: id, result: result ?? null });
        } else if (typeof command.notify === "string") {
            await connection.agent.notify(NOTIFICATIONS[command.notify] ?? command.notify, command.params ?? {});
            emit({ reply: id, result: null });
        } else if (Object.hasOwn(command, "answer")) {
            const waiting = held.get(JSON.stringify(command.answer));
            if (!waiting) throw new Error(`no permission request held under ${JSON.stringify(command.answer)}`);
            held.delete(JSON.stringify(command.answer));
            waiting.resolve({ outcome: command.outcome });
            emit({ reply: id, result: null });
        } else {
            throw new Error("a command has one of call, notify, answer");
        }
    } catch (e) {
        emit({ reply: id, error: errorObject(e) });
    }
}

const commands = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
commands.on("line", (line) => {
    if (!line.trim()) return;
    let command;
    try {
        command = JSON.parse(line);
    } catch (e) {
        emit({ reply: null, error: { code: -32700, message: `driver: bad command: ${e.message}` } });
        return;
    }
    run(command);
});
commands.on("close", () => {
    child.stdin.end();
    setTimeout(() => child.kill("SIGKILL"), 5000).unref();
});

child.on("error", (e) => {
    console.error(`driver: cannot start ${argv[0]}: ${e.message}`);
});
child.on("close", (code, signal) => {
    emit({ validated, invalid: invalidCount });
    emit({ exit: code, signal });
    connection.close();
    process.exit(0);
});
