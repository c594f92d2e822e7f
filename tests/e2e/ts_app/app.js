'use strict';
/*
 * One real DBOS TypeScript executor (@dbos-inc/dbos-sdk 5.2.11) for end-to-end tests, driven over
 * stdin/stdout. Plain CommonJS: no TypeScript compile step, no decorators (the workflow and the
 * step are registered with DBOS.registerWorkflow / DBOS.registerStep).
 *
 * The TypeScript twin of tests/e2e/dbos_app.py, with the same contract; tests/e2e/ts_harness.py
 * drives it. Run with `node app.js` from this folder after `npm ci`.
 *
 * Configuration (environment variables):
 *   RELAY_URL            conductorURL, e.g. ws://127.0.0.1:8090 (required)
 *   APP_NAME             DBOS application name = the app segment of the WebSocket path (required;
 *                        3-256 chars of lowercase letters, digits, '-' and '_')
 *   APP_VERSION          pinned applicationVersion, so several processes share one (required)
 *   SYSTEM_DATABASE_URL  Postgres URL of the DBOS system database (required)
 *   STEPS_DB_URL         Postgres URL where every step execution inserts a row into `step_runs`
 *                        (required; the table is created if missing)
 *   CONDUCTOR_KEY        conductor key, the last path segment (default "dev-key")
 *   EXECUTOR_METADATA    optional JSON object -> conductorExecutorMetadata
 *   DBOS_LOG_LEVEL       optional DBOS log level (default info)
 *   SYS_DB_POOL_SIZE     optional system database pool size (default 10)
 *
 * Protocol: stdout carries only JSON lines written by this script (DBOS logging and anything else
 * that writes to process.stdout goes to stderr).
 *   -> {"event": "launched", "executor_id": ..., "application_version": ..., "app_name": ..., "pid": ...}
 * stdin takes one JSON command per line:
 *   {"cmd": "start", "count": N, "steps": S, "step_secs": T}      (optional "workflow_ids": [...])
 *       -> {"event": "started", "workflow_ids": [...]}
 *   {"cmd": "ping"}                                               -> {"event": "pong"}
 *   {"cmd": "exit"}            (optional "timeout": seconds to let active workflows finish)
 *       -> DBOS.shutdown(), then {"event": "exited"} and the process exits with code 0.
 *   A malformed or unknown command -> {"event": "error", "message": ...}.
 * End of stdin behaves like {"cmd": "exit"}, so an executor never outlives its driver.
 *
 * The workflow `longWorkflow(nSteps, stepSecs)` runs steps 1..nSteps. Each step first inserts
 * (workflow_id, step_no, executor_id, pid) into step_runs, then sleeps stepSecs *inside* the step:
 * a SIGKILL during the sleep leaves the workflow PENDING with that step unfinished, so after
 * recovery exactly that one step may have run twice and every other step exactly once.
 *
 * No process-wide 'unhandledRejection' handler on purpose: the SDK's behaviour (e.g. a non-JSON
 * frame from the conductor crashing the process, conductor-protocol.md §6) stays observable.
 */

// Keep the real stdout for protocol lines only. Everything else that writes to process.stdout
// (console.log / console.info / console.debug, which DBOS's console logger uses) lands on stderr.
// This must happen before the SDK is loaded: it captures process.stdout.write at import time.
const protoWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);

function emit(event, fields = {}) {
  protoWrite(JSON.stringify({ event, ...fields }) + '\n');
}

function env(name, fallback) {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === '') {
    process.stderr.write(`ts app: missing required environment variable ${name}\n`);
    process.exit(2);
  }
  return value;
}

const RELAY_URL = env('RELAY_URL');
const APP_NAME = env('APP_NAME');
const APP_VERSION = env('APP_VERSION');
const SYSTEM_DATABASE_URL = env('SYSTEM_DATABASE_URL');
const STEPS_DB_URL = env('STEPS_DB_URL');
const CONDUCTOR_KEY = env('CONDUCTOR_KEY', 'dev-key');
const EXECUTOR_METADATA = process.env.EXECUTOR_METADATA ? JSON.parse(process.env.EXECUTOR_METADATA) : undefined;
const LOG_LEVEL = process.env.DBOS_LOG_LEVEL || 'info';
const SYS_DB_POOL_SIZE = Number.parseInt(process.env.SYS_DB_POOL_SIZE || '10', 10);

const readline = require('node:readline');
const { Pool } = require('pg');
const { DBOS } = require('@dbos-inc/dbos-sdk');

const STEP_RUNS_DDL = `
CREATE TABLE IF NOT EXISTS step_runs (
    id          bigserial PRIMARY KEY,
    workflow_id text        NOT NULL,
    step_no     integer     NOT NULL,
    executor_id text        NOT NULL,
    pid         integer     NOT NULL,
    ran_at      timestamptz NOT NULL DEFAULT now()
)`;

const stepsPool = new Pool({ connectionString: STEPS_DB_URL, max: 4 });
stepsPool.on('error', (err) => process.stderr.write(`ts app: steps pool error: ${err.message}\n`));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function ensureStepRunsTable() {
  // Two processes racing on CREATE TABLE IF NOT EXISTS can still collide on the catalog's unique
  // indexes (23505 unique_violation / 42P07 duplicate_table); the loser retries and sees the table.
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      await stepsPool.query(STEP_RUNS_DDL);
      return;
    } catch (err) {
      if (err.code !== '23505' && err.code !== '42P07') throw err;
      await sleep(200 * (attempt + 1));
    }
  }
  await stepsPool.query(STEP_RUNS_DDL);
}

async function runStepBody(stepNo, stepSecs) {
  await stepsPool.query(
    'INSERT INTO step_runs (workflow_id, step_no, executor_id, pid) VALUES ($1, $2, $3, $4)',
    [DBOS.workflowID, stepNo, DBOS.executorID, process.pid],
  );
  // A plain timer, not DBOS.sleep: DBOS.sleep is a durable step of its own. Sleeping here keeps
  // the step "in flight" so that a kill interrupts it before its checkpoint is written.
  await sleep(stepSecs * 1000);
  return stepNo;
}

const runStep = DBOS.registerStep(runStepBody, { name: 'run_step' });

async function longWorkflowBody(nSteps, stepSecs) {
  for (let stepNo = 1; stepNo <= nSteps; stepNo++) {
    await runStep(stepNo, stepSecs);
  }
  return nSteps;
}

const longWorkflow = DBOS.registerWorkflow(longWorkflowBody, { name: 'long_workflow' });

async function handleStart(cmd) {
  const count = Number.parseInt(cmd.count ?? 1, 10);
  const steps = Number.parseInt(cmd.steps ?? 1, 10);
  const stepSecs = Number(cmd.step_secs ?? 0);
  const wanted = cmd.workflow_ids;
  if (wanted !== undefined && wanted !== null && wanted.length !== count) {
    throw new Error('workflow_ids must have `count` entries');
  }
  const ids = [];
  for (let i = 0; i < count; i++) {
    const params = wanted ? { workflowID: String(wanted[i]) } : {};
    const handle = await DBOS.startWorkflow(longWorkflow, params)(steps, stepSecs);
    ids.push(handle.workflowID);
  }
  emit('started', { workflow_ids: ids });
}

let shuttingDown = false;

async function shutdown(timeoutSecs = 0) {
  if (shuttingDown) return;
  shuttingDown = true;
  try {
    const options = timeoutSecs > 0 ? { workflowCompletionTimeoutMS: timeoutSecs * 1000 } : undefined;
    await DBOS.shutdown(options);
    await stepsPool.end().catch(() => {});
  } catch (err) {
    process.stderr.write(`ts app: shutdown failed: ${err && err.stack ? err.stack : err}\n`);
  } finally {
    emit('exited');
    // Workflows still sleeping inside a step would otherwise keep the event loop alive.
    process.exit(0);
  }
}

async function handleLine(raw) {
  const line = raw.trim();
  if (!line) return;
  try {
    const cmd = JSON.parse(line);
    const kind = cmd && cmd.cmd;
    if (kind === 'start') {
      await handleStart(cmd);
    } else if (kind === 'ping') {
      emit('pong');
    } else if (kind === 'exit') {
      await shutdown(Number.parseInt(cmd.timeout ?? 0, 10) || 0);
    } else {
      emit('error', { message: `unknown command ${JSON.stringify(kind)}` });
    }
  } catch (err) {
    emit('error', { message: `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : err}` });
  }
}

async function main() {
  await ensureStepRunsTable();
  DBOS.setConfig({
    name: APP_NAME,
    systemDatabaseUrl: SYSTEM_DATABASE_URL,
    systemDatabasePoolSize: SYS_DB_POOL_SIZE,
    applicationVersion: APP_VERSION,
    logLevel: LOG_LEVEL,
  });
  const launchOptions = { conductorURL: RELAY_URL, conductorKey: CONDUCTOR_KEY };
  if (EXECUTOR_METADATA !== undefined) launchOptions.conductorExecutorMetadata = EXECUTOR_METADATA;
  await DBOS.launch(launchOptions);
  // With a conductor key (and outside DBOS Cloud) launch() replaces the executor id with a fresh
  // crypto.randomUUID() (dist/src/dbos.js `launch`: globalParams.executorID = randomUUID());
  // DBOS.executorID is a getter over that same globalParams value that executor_info reports.
  emit('launched', {
    executor_id: DBOS.executorID,
    application_version: DBOS.applicationVersion,
    app_name: APP_NAME,
    pid: process.pid,
  });

  // Commands are handled one at a time, in order, like the Python app.
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  let chain = Promise.resolve();
  rl.on('line', (raw) => {
    chain = chain.then(() => handleLine(raw));
  });
  rl.on('close', () => {
    chain = chain.then(() => shutdown(0));
  });
}

main().catch((err) => {
  process.stderr.write(`ts app: launch failed: ${err && err.stack ? err.stack : err}\n`);
  emit('error', { message: `launch failed: ${err && err.message ? err.message : err}` });
  process.exit(1);
});
