// A fake silt API for trying the console without silt: index.html?fake=500 shows 500 tables.
// &fake_token=T makes it answer 401 until the console sends `Authorization: Bearer T`.
// Development only: the console loads it only when ?fake is in the URL.
(function () {
  'use strict';
  const params = new URLSearchParams(location.search);
  const N = Math.max(1, Number(params.get('fake')) || 500);
  const TOKEN = params.get('fake_token');
  const started = Date.now();
  const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

  function table(i, now) {
    const phase = (now - started) / 1000 + i;
    const buckets = [];
    const n = 1 + (i % 4);
    let lag = 0;
    for (let b = 0; b < n; b++) {
      const hw = 1000 * (i + 1) + Math.floor((now - started) / 10) + b * 37;
      const l = Math.floor(200 + 150 * Math.sin(phase / 7 + b));
      lag += l;
      buckets.push({ bucket: b, high_watermark: hw, lake_offset: hw - l, log_start_offset: Math.floor(hw / 3), hot_bytes: hw * 64, segments: 1 + (hw >> 12), retention_held_by_tiering: i % 97 === 5 });
    }
    const bad = i % 53 === 7;
    return {
      table: `db${i % 10}.t${String(i).padStart(4, '0')}`, table_id: i, kind: i % 3 ? 'log' : 'primary_key',
      lake_uri: `/data/lake/db${i % 10}/t${i}`, job_state: bad ? 'stalled' : 'running', freshness_ms: 5000,
      buckets, lag_offsets: lag, lag_seconds: 2 + 1.5 * Math.sin(phase / 11), delta_version: 10 + Math.floor((now - started) / 5000) + i,
      checkpoints: 40 + i, restarts: i % 71 === 3 ? 2 : 0,
      maintenance: { last_ms: now - 60000, runs: 3, files_deleted: 12, bytes_reclaimed: 123456, active_files: 5 + (i % 20), files_on_disk: 9 + (i % 20) },
      commits: { commits: 40 + i, recent_p50_ms: 20 + (i % 30), recent_p99_ms: 300 + i, last_compaction_ms: 0, compactions: 1, files_compacted: 4, rows_compacted: 1000, bytes_compacted: 65536 },
      problem: bad ? 'the lake at /data/lake is not writable: permission denied (storage failed)' : null,
    };
  }
  const jobs = [];
  for (let i = 0; i < 12; i++) {
    jobs.push({
      id: `job-${i}-0f3a`, name: `job-${i}`, state: i === 3 ? 'failed' : i === 5 ? 'restarting' : 'running', desired: 'running',
      ...(i === 3 ? { failure: 'sink: the Delta table moved', failure_cause: 'user' } : {}),
      submitted_at_ms: started - 3600000, checkpoint_interval_ms: 1000,
      parallelism: { source: 2, 'transform-0-filter': 2, 'sink-writer': 2, 'sink-committer': 1 },
      checkpoints: [1, 2, 3].map((k) => ({ id: 100 + k, duration_ms: 100 + k, size_bytes: 2600, completed_at_ms: started - (3 - k) * 1000, is_final: false })),
      checkpoints_completed: 103, checkpoints_failed: i === 5 ? 2 : 0, restarts: i === 5 ? 3 : 0, buffered_bytes: 0,
      operators: [], graph: [],
    });
  }
  function job(j, now) {
    const t = (now - started) / 10;
    return Object.assign({}, j, {
      operators: [
        { name: 'source', parallelism: 2, records_in: 5000 + t * 2, records_out: 5000 + t * 2, bytes_in: 3e5, bytes_out: 3e5, backpressured_ms: t * 8, last_checkpoint_bytes: 44, last_snapshot_ms: 0 },
        { name: 'transform-0-filter', parallelism: 2, records_in: 5000 + t * 2, records_out: 4500 + t, bytes_in: 3e5, bytes_out: 2.7e5, backpressured_ms: 0, last_checkpoint_bytes: 0, last_snapshot_ms: 0 },
        { name: 'sink-writer', parallelism: 2, records_in: 4500 + t, records_out: 0, bytes_in: 2.7e5, bytes_out: 0, backpressured_ms: 0, last_checkpoint_bytes: 2500, last_snapshot_ms: 3 },
        { name: 'sink-committer', parallelism: 1, records_in: 0, records_out: 0, bytes_in: 0, bytes_out: 0, backpressured_ms: 0, last_checkpoint_bytes: 60, last_snapshot_ms: 1 },
      ],
      graph: [
        `job ${j.name} (3 operators, checkpoint every 1s)`,
        '  source                   x2   fluss-source db0.t0000 (3 buckets) from earliest -> [a, b]',
        '  transform-0-filter       x2   filter (a > 10) -> [a, b]',
        '    source -[forward]-> transform-0-filter',
        '  sink                     x2   delta-sink /data/lake/__jobs/x/sink (Log) -> writers x2 + committer x1',
        '    transform-0-filter -[hash(__bucket)]-> sink',
      ],
    });
  }

  window.SILT_FAKE_FETCH = async function (url, init) {
    await new Promise((r) => setTimeout(r, 5));
    if (TOKEN && (init.headers || {}).Authorization !== 'Bearer ' + TOKEN) return json(401, { error: 'missing or wrong bearer token' });
    const now = Date.now();
    const u = new URL(url, location.href);
    const p = u.pathname;
    const method = init.method || 'GET';
    if (p === '/v1/tables') {
      const out = [];
      for (let i = 0; i < N; i++) out.push(table(i, now));
      return json(200, out);
    }
    if (p === '/v1/jobs' && method === 'GET') return json(200, jobs.map((j) => job(j, now)));
    let m = /^\/v1\/jobs\/([^/]+)$/.exec(p);
    if (m) { const j = jobs.find((x) => x.id === decodeURIComponent(m[1])); return j ? json(200, job(j, now)) : json(404, { error: 'unknown job' }); }
    m = /^\/v1\/tables\/([^/]+)\/history$/.exec(p);
    if (m) {
      const samples = [];
      for (let k = 360; k >= 0; k--) {
        const t = now - k * 10000;
        samples.push({ t_ms: t, lag_offsets: 300 + Math.round(200 * Math.sin(t / 60000)), lag_ms: 2500 + 1500 * Math.sin(t / 90000), freshness_ms: ((t / 1000) % 17) * 1000, commit_ms: k % 5 ? null : 20 + (k % 7) * 10 });
      }
      return json(200, { table: decodeURIComponent(m[1]), interval_ms: 10000, samples });
    }
    if (p === '/v1/query') {
      const body = JSON.parse(init.body);
      if (/\$lake\$snapshots/.test(body.sql)) {
        const rows = [];
        for (let v = 20; v > 0; v--) rows.push({ version: v, committed_at: new Date(now - (20 - v) * 5000).toISOString(), operation: 'WRITE', checkpoint_id: v, bucket_offsets: JSON.stringify({ 0: v * 100, 1: v * 110 }) });
        return json(200, { columns: [{ name: 'version', type: 'Int64' }, { name: 'committed_at', type: 'Timestamp(ms, "UTC")' }, { name: 'operation', type: 'Utf8' }, { name: 'checkpoint_id', type: 'Int64' }, { name: 'bucket_offsets', type: 'Utf8' }], rows, row_count: rows.length, elapsed_ms: 3, tables: [] });
      }
      if (body.deadline === '50ms') return json(504, { error: 'deadline of 50ms passed while executing: 3 of 24 lake files scanned (4 opened), 0 rows returned; the query was cancelled (raise the deadline, or narrow the query)', kind: 'deadline' });
      return json(200, { columns: [{ name: 'a', type: 'Int64' }, { name: 'b', type: 'Utf8' }], rows: [{ a: 1, b: 'x' }, { a: 2, b: null }], row_count: 2, elapsed_ms: 4, tables: [] });
    }
    return json(404, { error: 'not in the fake API' });
  };
})();
