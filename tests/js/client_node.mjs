// The official Kubernetes JavaScript client (@kubernetes/client-node)
// against `kbrun sim` (run by tests/e2e/client_node.sh, which starts the
// simulator and passes its kubeconfig): typed CRUD with the client's own
// models and errors, a list/watch informer whose cache must equal a fresh
// list, a watch that follows a Job to completion, a Deployment to available,
// and the cluster's nodes as the simulator's config declares them. Prints one line per check;
// exits 1 on the first failure, or after 60 s whatever happens.
import assert from 'node:assert/strict';
import path from 'node:path';

const moduleDir = process.env.KB_CLIENT_NODE_MODULE;
const k8s = await import(path.join(moduleDir, 'dist', 'index.js'));
const deadline = setTimeout(() => {
  console.error('FAIL: still running after 60 s');
  process.exit(1);
}, 60000);

const kc = new k8s.KubeConfig();
kc.loadFromFile(process.env.KUBECONFIG);
// client-node 1.x refuses a plain http:// server unless skipTLSVerify is
// set: the simulator serves http on loopback, where there is no TLS to skip
const loaded = kc.getCurrentCluster();
assert.ok(loaded.server.startsWith('http://127.0.0.1:'), 'the simulator on loopback');
kc.clusters = kc.clusters.map((c) => ({ ...c, skipTLSVerify: true }));
const core = kc.makeApiClient(k8s.CoreV1Api);
const batch = kc.makeApiClient(k8s.BatchV1Api);
const apps = kc.makeApiClient(k8s.AppsV1Api);
const ns = 'default';

function ok(what) { console.log(`ok ${what}`); }

// Polls fn() (bounded: 600 x 50 ms) until it returns a truthy value.
async function eventually(what, fn) {
  for (let i = 0; i < 600; i++) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`never: ${what}`);
}

async function nodes() {
  const list = await core.listNode();
  assert.equal(list.items.length, Number(process.env.KB_NODES), 'the nodes the config declares');
  for (const n of list.items) {
    const ready = n.status.conditions.find((c) => c.type === 'Ready');
    assert.equal(ready.status, 'True', `${n.metadata.name} is Ready`);
    assert.equal(n.status.capacity.cpu, process.env.KB_NODE_CPU, `${n.metadata.name} cpu`);
  }
  ok(`listNode: ${list.items.length} nodes, Ready, ${process.env.KB_NODE_CPU} cpu each`);
}

async function configMapCrud() {
  const body = { metadata: { name: 'js-cm', labels: { from: 'client-node' } }, data: { a: '1' } };
  const created = await core.createNamespacedConfigMap({ namespace: ns, body });
  assert.equal(created.metadata.name, 'js-cm');
  assert.ok(created.metadata.uid && created.metadata.resourceVersion, 'uid and resourceVersion set');
  assert.ok(created.metadata.creationTimestamp instanceof Date, 'creationTimestamp parsed as a Date');
  const got = await core.readNamespacedConfigMap({ name: 'js-cm', namespace: ns });
  assert.deepEqual(got.data, { a: '1' });
  got.data.b = '2';
  const replaced = await core.replaceNamespacedConfigMap({ name: 'js-cm', namespace: ns, body: got });
  assert.deepEqual(replaced.data, { a: '1', b: '2' });
  assert.notEqual(replaced.metadata.resourceVersion, created.metadata.resourceVersion);
  // a stale resourceVersion: the client's ApiException with the Status
  await assert.rejects(
    core.replaceNamespacedConfigMap({ name: 'js-cm', namespace: ns, body: { ...got, metadata: { ...got.metadata, resourceVersion: created.metadata.resourceVersion } } }),
    (e) => e.code === 409 && JSON.parse(e.body).reason === 'Conflict');
  const listed = await core.listNamespacedConfigMap({ namespace: ns, labelSelector: 'from=client-node' });
  assert.deepEqual(listed.items.map((c) => c.metadata.name), ['js-cm']);
  await core.deleteNamespacedConfigMap({ name: 'js-cm', namespace: ns });
  await assert.rejects(core.readNamespacedConfigMap({ name: 'js-cm', namespace: ns }),
    (e) => e.code === 404 && JSON.parse(e.body).reason === 'NotFound');
  ok('ConfigMap create/read/replace/conflict/list/delete/404');
}

function jobBody(name) {
  return {
    metadata: { name },
    spec: {
      completions: 2, parallelism: 2, backoffLimit: 0,
      template: {
        // 600 cluster seconds: 1 s real at the simulator's x600, so the
        // informer sees each pod change (Pending/Running, then Succeeded);
        // 2 s (3 ms real) let a busy simulator (ASan, a loaded CI machine)
        // write a pod once, already finished: two ADDs and no updates
        metadata: { annotations: { 'sim.kbrun.io/duration': '600' } },
        spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox', command: ['true'] }] },
      },
    },
  };
}

// An informer on the namespace's pods: its cache, once the Job's pods
// finished, holds exactly what a fresh list holds, with the same versions.
async function informer() {
  const seen = { add: 0, update: 0 };
  const inf = k8s.makeInformer(kc, `/api/v1/namespaces/${ns}/pods`,
    () => core.listNamespacedPod({ namespace: ns }));
  inf.on('add', () => seen.add++);
  inf.on('update', () => seen.update++);
  let stopping = false; // stop() aborts the watch, which the informer reports as an error
  inf.on('error', (e) => {
    if (stopping) return;
    console.error('FAIL informer error', e);
    process.exit(1);
  });
  await inf.start();
  await batch.createNamespacedJob({ namespace: ns, body: jobBody('js-informed') });
  await eventually('the informer sees both pods Succeeded', () => {
    const pods = inf.list(ns).filter((p) => p.metadata.labels?.['job-name'] === 'js-informed');
    return pods.length === 2 && pods.every((p) => p.status.phase === 'Succeeded');
  });
  const fresh = await core.listNamespacedPod({ namespace: ns });
  const key = (p) => `${p.metadata.name}@${p.metadata.resourceVersion}`;
  assert.deepEqual(inf.list(ns).map(key).sort(), fresh.items.map(key).sort(), 'the cache equals a fresh list');
  assert.ok(seen.add >= 2 && seen.update >= 2, `add and update events (${seen.add} adds, ${seen.update} updates)`);
  stopping = true;
  await inf.stop();
  ok(`informer: cache equals a fresh list (${fresh.items.length} pods; ${seen.add} adds, ${seen.update} updates)`);
}

// A raw watch on jobs follows one to its Complete condition.
async function watchJob() {
  const watch = new k8s.Watch(kc);
  const types = [];
  let done, aborted = false;
  const finished = new Promise((resolve) => { done = resolve; });
  const list = await batch.listNamespacedJob({ namespace: ns });
  const req = await watch.watch(`/apis/batch/v1/namespaces/${ns}/jobs`,
    { resourceVersion: list.metadata.resourceVersion, fieldSelector: 'metadata.name=js-watched' },
    (type, obj) => {
      types.push(type);
      if (obj.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')) done(obj);
    },
    (err) => {
      if (err && !aborted) {
        console.error('FAIL watch ended', err);
        process.exit(1);
      }
    });
  await batch.createNamespacedJob({ namespace: ns, body: jobBody('js-watched') });
  const job = await finished;
  aborted = true;
  req.abort();
  assert.equal(types[0], 'ADDED');
  assert.ok(types.includes('MODIFIED'));
  assert.equal(job.status.succeeded, 2, 'both completions');
  ok(`watch: ${types.length} events to Complete (succeeded ${job.status.succeeded})`);
}

// A Deployment to available: its ReplicaSet's pods scheduled and run by the
// simulator's model, the status as the deployment controller writes it.
async function deploymentAvailable() {
  const body = {
    metadata: { name: 'js-web', labels: { app: 'js-web' } },
    spec: {
      replicas: 3,
      selector: { matchLabels: { app: 'js-web' } },
      template: {
        metadata: { labels: { app: 'js-web' } },
        spec: { containers: [{ name: 'web', image: 'nginx', resources: { requests: { cpu: '100m' } } }] },
      },
    },
  };
  await apps.createNamespacedDeployment({ namespace: ns, body });
  const d = await eventually('js-web available', async () => {
    const got = await apps.readNamespacedDeployment({ name: 'js-web', namespace: ns });
    const avail = got.status?.conditions?.find((c) => c.type === 'Available');
    return got.status?.availableReplicas === 3 && avail?.status === 'True' ? got : null;
  });
  assert.equal(d.status.readyReplicas, 3);
  assert.equal(d.status.updatedReplicas, 3);
  assert.equal(d.status.observedGeneration, d.metadata.generation);
  const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=js-web' });
  assert.equal(pods.items.length, 3, 'three pods');
  for (const p of pods.items) {
    assert.equal(p.status.phase, 'Running', `${p.metadata.name} Running`);
    assert.equal(p.metadata.ownerReferences[0].kind, 'ReplicaSet');
    assert.ok(p.spec.nodeName, `${p.metadata.name} scheduled`);
  }
  ok(`Deployment available: 3/3 Running pods on ${new Set(pods.items.map((p) => p.spec.nodeName)).size} node(s)`);
}

try {
  await nodes();
  await configMapCrud();
  await informer();
  await watchJob();
  await deploymentAvailable();
  clearTimeout(deadline);
  console.log('client_node: ok');
} catch (e) {
  console.error('FAIL', e);
  process.exit(1);
}
