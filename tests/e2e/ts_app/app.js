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
 *   {"cmd": "ground", "prefix": P}   -> {"event": "ground", "workflow_ids": {...}, "schedule": name}
 *       starts one workflow of every kind a Conductor operation acts on (see `ground` below)
 *   {"cmd": "release", "workflow_id": W, "message": M}   DBOS.send(W, M, topic "release")
 *       -> {"event": "released", "workflow_id": W}
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

// ---- the ground: one workflow of every kind (the same names and shapes as in dbos_app.py) ------

// Registered by `ground` (database-backed, so only executors that build a ground write it),
// global concurrency 1: the first workflow enqueued runs (and blocks), the others stay ENQUEUED;
// worker concurrency 1, so that it can drive an autoscaling policy (check_autoscale in tests/e2e/test_queues_schedules_api.py).
const GROUND_QUEUE = 'ground_queue';
const flakyAttempts = new Map();

// PENDING until a message on topic "release" arrives; says so in event "state".
const blockedWorkflow = DBOS.registerWorkflow(async (label) => {
  await DBOS.setEvent('state', 'waiting');
  const message = await DBOS.recv('release', 3600);
  await DBOS.setEvent('state', 'released');
  return `${label}: ${message}`;
}, { name: 'blocked_workflow' });

const plainStep = DBOS.registerStep(async (n) => n * 10, { name: 'plain_step' });

// Fails on its first attempt in each workflow, succeeds on the retry (one step row).
const flakyStep = DBOS.registerStep(async () => {
  const wf = DBOS.workflowID || '';
  flakyAttempts.set(wf, (flakyAttempts.get(wf) || 0) + 1);
  if (flakyAttempts.get(wf) === 1) throw new Error('flaky: first attempt fails');
  return `ok after ${flakyAttempts.get(wf)} attempts`;
}, { name: 'flaky_step', retriesAllowed: true, maxAttempts: 3, intervalSeconds: 0.1, backoffRate: 1 });

const failingStep = DBOS.registerStep(async () => {
  throw new Error('failing_step always fails');
}, { name: 'failing_step' });

// SUCCESS after steps (one retried, one failed and caught), events, a stream and a message.
const stepsWorkflow = DBOS.registerWorkflow(async (notifyId) => {
  await plainStep(1);
  await flakyStep();
  try {
    await failingStep();
  } catch (err) {
    // expected: the failure is recorded as the step's error
  }
  await plainStep(2);
  await DBOS.setEvent('progress', { done: 3 });
  await DBOS.setEvent('result', 'steps done');
  for (let i = 0; i < 3; i++) await DBOS.writeStream('numbers', i);
  await DBOS.closeStream('numbers');
  await DBOS.send(notifyId, 'a note for you', 'note');
  return 'steps done';
}, { name: 'steps_workflow' });

// ERROR: one step, then it throws.
const failingWorkflow = DBOS.registerWorkflow(async () => {
  await plainStep(1);
  throw new Error('failing_workflow failed on purpose');
}, { name: 'failing_workflow' });

const childWorkflow = DBOS.registerWorkflow(async (n) => plainStep(n), { name: 'child_workflow' });

// SUCCESS once its children (ids <parent>-child-<i>) have.
const parentWorkflow = DBOS.registerWorkflow(async (nChildren) => {
  const parent = DBOS.workflowID;
  const handles = [];
  for (let i = 0; i < nChildren; i++) {
    handles.push(await DBOS.startWorkflow(childWorkflow, { workflowID: `${parent}-child-${i}` })(i));
  }
  let sum = 0;
  for (const h of handles) sum += await h.getResult();
  return sum;
}, { name: 'parent_workflow' });

const tickWorkflow = DBOS.registerWorkflow(async (scheduledAt, context) => {
  await plainStep(0);
}, { name: 'tick_workflow' });

/*
 * Starts the ground under workflow ids beginning with `prefix`; returns their ids.
 *   running   blocked_workflow, PENDING until released
 *   queued    3 blocked_workflows on ground_queue: one PENDING, two ENQUEUED
 *   failed    failing_workflow, ERROR
 *   steps     steps_workflow, SUCCESS (5 steps, events, stream "numbers", sends "note" to running)
 *   parent    parent_workflow(2), SUCCESS; children <parent>-child-0 and -1
 *   schedule  <prefix>-tick, every 2 s: tick_workflow
 */
async function ground(prefix) {
  const ids = {
    running: `${prefix}-running`, failed: `${prefix}-failed`, steps: `${prefix}-steps`,
    parent: `${prefix}-parent`, queued: [0, 1, 2].map((i) => `${prefix}-queued-${i}`),
  };
  await DBOS.startWorkflow(blockedWorkflow, { workflowID: ids.running })('running');
  await DBOS.registerQueue(GROUND_QUEUE, { globalConcurrency: 1, workerConcurrency: 1 });
  for (const wf of ids.queued) {
    await DBOS.startWorkflow(blockedWorkflow, { workflowID: wf, queueName: GROUND_QUEUE })(wf);
  }
  await DBOS.startWorkflow(failingWorkflow, { workflowID: ids.failed })();
  await DBOS.startWorkflow(stepsWorkflow, { workflowID: ids.steps })(ids.running);
  await DBOS.startWorkflow(parentWorkflow, { workflowID: ids.parent })(2);
  ids.children = [0, 1].map((i) => `${ids.parent}-child-${i}`);
  const schedule = `${prefix}-tick`;
  await DBOS.createSchedule({ scheduleName: schedule, workflowFn: tickWorkflow, schedule: '*/2 * * * * *' });
  return { workflow_ids: ids, schedule };
}

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
    } else if (kind === 'ground') {
      emit('ground', await ground(String(cmd.prefix)));
    } else if (kind === 'release') {
      await DBOS.send(String(cmd.workflow_id), cmd.message ?? 'go', 'release');
      emit('released', { workflow_id: cmd.workflow_id });
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
  // Conductor's (here Relay's) alerts: each is reported on stdout.
  DBOS.setAlertHandler(async (name, message, metadata) => {
    emit('alert', { name, message, metadata });
  });
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
