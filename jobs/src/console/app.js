// silt console: a single page over silt's REST API (see CONTRACT.md for every call it makes).
// No framework and no build step: plain DOM, HTML built as one string per view and set once.
// Vendored: uPlot (charts) and dagre (job graph layout), loaded before this file.
(function () {
  'use strict';

  // ---------------------------------------------------------------- helpers
  const $ = (sel, root) => (root || document).querySelector(sel);
  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (s) => (s === null || s === undefined ? '' : String(s)).replace(/[&<>"']/g, (c) => ESC[c]);
  const enc = encodeURIComponent;

  function fmtInt(n) {
    if (n === null || n === undefined || n === '') return '—';
    n = Number(n);
    if (!Number.isFinite(n)) return '—';
    return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return '—';
    b = Number(b);
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(b < 10 ? 1 : 0) : String(b)) + ' ' + u[i];
  }
  function fmtDur(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(Number(ms))) return '—';
    ms = Number(ms);
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    const m = s / 60;
    if (m < 60) return m.toFixed(m < 10 ? 1 : 0) + ' min';
    const h = m / 60;
    return h < 48 ? h.toFixed(1) + ' h' : (h / 24).toFixed(1) + ' d';
  }
  const fmtAgo = (t) => (t > 0 ? fmtDur(Math.max(0, Date.now() - t)) + ' ago' : '—');
  const fmtTime = (t) => (t > 0 ? new Date(t).toLocaleTimeString() : '—');
  const pill = (text, cls) => `<span class="pill ${cls || ''}">${esc(text)}</span>`;
  const stateClass = (s) => ({ running: 'ok', finished: '', created: '', restarting: 'warn', stalled: 'bad', failed: 'bad', cancelled: '' }[s] ?? 'warn');

  function setStatus(text, bad) {
    const el = $('#status');
    el.textContent = text;
    el.className = bad ? 'err' : 'muted';
  }

  // ---------------------------------------------------------------- API and token
  const TOKEN_KEY = 'silt.console.token';
  const params = new URLSearchParams(location.search);
  // ?api=http://host:port points the console at another origin (development only; silt sends no
  // CORS headers, so in production the console is served by silt itself under /ui).
  const API_BASE = (params.get('api') || '').replace(/\/$/, '');
  let tokenWaiter = null;

  function askToken(refused) {
    if (tokenWaiter) return tokenWaiter;
    const dialog = $('#token-dialog');
    const input = $('#token-input');
    const error = $('#token-error');
    error.hidden = !refused;
    error.textContent = refused ? 'The token was refused (401). Enter the current rest.token.' : '';
    input.value = '';
    tokenWaiter = new Promise((resolve) => {
      const form = $('#token-form');
      const onSubmit = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) return;
        sessionStorage.setItem(TOKEN_KEY, t);
        form.removeEventListener('submit', onSubmit);
        dialog.close();
        tokenWaiter = null;
        $('#forget-token').hidden = false;
        resolve();
      };
      form.addEventListener('submit', onSubmit);
      dialog.addEventListener('cancel', (ev) => ev.preventDefault()); // nothing to see without it
      dialog.showModal();
      input.focus();
    });
    return tokenWaiter;
  }

  // Every call goes through here: the bearer token, JSON in and out, 401 -> ask and retry.
  async function api(method, path, opts) {
    opts = opts || {};
    const doFetch = window.SILT_FAKE_FETCH || window.fetch.bind(window);
    for (;;) {
      const headers = {};
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (token) headers.Authorization = 'Bearer ' + token;
      let body;
      if (opts.body !== undefined) {
        body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
        headers['Content-Type'] = opts.contentType || 'application/json';
      }
      const res = await doFetch(API_BASE + path, { method, headers, body, signal: opts.signal, cache: 'no-store' });
      if (res.status === 401) {
        if (token) sessionStorage.removeItem(TOKEN_KEY);
        await askToken(!!token);
        continue;
      }
      const text = await res.text();
      let json = null;
      try { json = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
      return { status: res.status, ok: res.ok, json, text, headers: res.headers };
    }
  }
  // GET that must succeed: throws with the API's own error text.
  async function getJson(path, opts) {
    const r = await api('GET', path, opts);
    if (!r.ok) throw new Error(`${path}: ${r.status} ${(r.json && r.json.error) || r.text || ''}`.trim());
    return r.json;
  }
  function query(sql, deadline, opts) {
    const body = { sql };
    if (deadline) body.deadline = deadline;
    if (opts && opts.wait) body.wait_for_tiering = true;
    return api('POST', '/v1/query', { body, signal: opts && opts.signal });
  }

  // ---------------------------------------------------------------- polling and routing
  // A page is a function (view, ...args) returning a dispose function; pollers stop with it.
  function poller(fn, ms) {
    let stopped = false;
    let timer = null;
    const tick = async () => {
      if (stopped) return;
      try {
        await fn();
        if (!stopped) setStatus('updated ' + new Date().toLocaleTimeString());
      } catch (e) {
        if (!stopped) setStatus('API error: ' + e.message, true);
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return () => { stopped = true; clearTimeout(timer); };
  }

  const ROUTES = [
    [/^#?\/?$/, 'overview', overviewPage],
    [/^#\/table\/(.+)$/, 'overview', tablePage],
    [/^#\/jobs\/?$/, 'jobs', jobsPage],
    [/^#\/job\/(.+)$/, 'jobs', jobPage],
    [/^#\/query\/?$/, 'query', queryPage],
  ];
  let dispose = null;
  function route() {
    if (dispose) { try { dispose(); } catch (_) { /* ignore */ } dispose = null; }
    const view = $('#view');
    view.innerHTML = '';
    const hash = location.hash || '#/';
    for (const [re, nav, page] of ROUTES) {
      const m = re.exec(hash);
      if (!m) continue;
      document.querySelectorAll('header nav a').forEach((a) => a.classList.toggle('active', a.dataset.nav === nav));
      view.dataset.route = page.name;
      dispose = page(view, ...m.slice(1).map(decodeURIComponent)) || null;
      return;
    }
    view.innerHTML = `<p>No such page: <code>${esc(hash)}</code>. <a href="#/">Overview</a></p>`;
  }

  // ---------------------------------------------------------------- samples kept in the page
  // What the page polled (bounded), for the health checks ("lag growing", "restarting") from
  // the moment the page is open; the table page's charts read silt's own history.
  const SAMPLES_MAX = 1800; // one hour at a 2 s poll
  const samples = new Map(); // table -> [{t_ms, lag_offsets, lag_ms, restarts, delta_version}]
  function record(tables) {
    const now = Date.now();
    for (const t of tables) {
      let a = samples.get(t.table);
      if (!a) { a = []; samples.set(t.table, a); }
      a.push({ t_ms: now, lag_offsets: t.lag_offsets, lag_ms: t.lag_seconds * 1000, restarts: t.restarts, delta_version: t.delta_version });
      if (a.length > SAMPLES_MAX) a.splice(0, a.length - SAMPLES_MAX);
    }
  }

  function hotOf(t) {
    let bytes = 0; let span = 0; let any = false; let held = false;
    for (const b of t.buckets || []) {
      if (b.hot_bytes !== undefined) { any = true; bytes += b.hot_bytes; }
      span += b.high_watermark - (b.log_start_offset || 0);
      if (b.retention_held_by_tiering) held = true;
    }
    return { bytes: any ? bytes : null, span, held };
  }

  // Severity 3: broken, 2: needs attention, 1: watch, 0: fine; with the reasons.
  function tableHealth(t) {
    const reasons = [];
    let sev = 0;
    const up = (s, why) => { sev = Math.max(sev, s); reasons.push(why); };
    if (t.problem) up(3, t.problem);
    if (t.job_state !== 'running') up(t.job_state === 'stalled' || t.job_state === 'failed' ? 3 : 2, 'tiering job ' + t.job_state);
    const a = samples.get(t.table) || [];
    if (a.length >= 2 && a[a.length - 1].restarts > a[Math.max(0, a.length - 30)].restarts) up(2, 'tiering job restarting');
    else if (t.restarts > 0) up(1, t.restarts + ' restarts');
    if (hotOf(t).held) up(2, 'retention held back by tiering');
    if (a.length >= 6) {
      const w = a.slice(-6);
      let rising = true;
      for (let i = 1; i < w.length; i++) if (w[i].lag_ms < w[i - 1].lag_ms) rising = false;
      if (rising && w[5].lag_ms > w[0].lag_ms + (t.freshness_ms || 0)) up(2, 'lag growing');
    }
    if (t.freshness_ms && t.lag_seconds * 1000 > 3 * t.freshness_ms) up(1, 'lag over 3× freshness');
    return { sev, reasons };
  }
  function jobHealth(j) {
    if (j.state === 'failed') return 3;
    if (j.state === 'restarting' || (j.desired === 'running' && j.state !== 'running' && j.state !== 'created')) return 2;
    if (j.restarts > 0 || j.checkpoints_failed > 0) return 1;
    return 0;
  }
  function trend(name) {
    const a = samples.get(name);
    if (!a || a.length < 2) return '';
    const d = a[a.length - 1].lag_offsets - a[a.length - 2].lag_offsets;
    if (d > 0) return ` <span class="trend-up" title="+${d} since the last poll">▲</span>`;
    if (d < 0) return ` <span class="trend-down" title="${d} since the last poll">▼</span>`;
    return '';
  }

  // ---------------------------------------------------------------- Overview
  function overviewPage(view) {
    view.innerHTML = `
      <h1>Overview <span class="sub" id="ov-sub"></span></h1>
      <div class="cards" id="ov-cards"></div>
      <h2>Tables <span class="sub" id="ov-render"></span></h2>
      <div class="toolbar"><input type="search" id="ov-filter" placeholder="filter tables" aria-label="filter tables"></div>
      <div id="ov-tables"><p class="muted">Loading…</p></div>
      <h2>Jobs</h2>
      <div id="ov-jobs"><p class="muted">Loading…</p></div>`;
    let last = null;
    const filter = $('#ov-filter', view);
    filter.value = sessionStorage.getItem('silt.console.filter') || '';
    filter.addEventListener('input', () => {
      sessionStorage.setItem('silt.console.filter', filter.value);
      if (last) renderTables(last.tables);
    });

    function renderTables(tables) {
      const t0 = performance.now();
      const f = filter.value.trim().toLowerCase();
      const rows = [];
      for (const t of tables) {
        if (f && !t.table.toLowerCase().includes(f)) continue;
        rows.push({ t, h: tableHealth(t), hot: hotOf(t) });
      }
      rows.sort((a, b) => b.h.sev - a.h.sev || (a.t.table < b.t.table ? -1 : 1));
      const out = [];
      out.push(`<table class="grid" id="tables-table"><thead><tr>
        <th>table</th><th>kind</th><th>tiering</th>
        <th class="num" title="hot rows (hot_rows), else offsets held hot: high watermark − log start">hot rows</th>
        <th class="num">hot bytes</th><th class="num">lake version</th>
        <th class="num">lag offsets</th><th class="num">lag</th><th class="num" title="table.datalake.freshness">freshness</th>
        <th class="num">lake files</th><th class="num">lake bytes</th><th class="num">commit p50 / p99</th><th>last maintenance</th><th>health</th>
        </tr></thead><tbody>`);
      for (const { t, h, hot } of rows) {
        const m = t.maintenance || {};
        const c = t.commits || {};
        out.push(`<tr class="sev-${h.sev}" data-table="${esc(t.table)}">
          <td class="nowrap"><a href="#/table/${enc(t.table)}">${esc(t.table)}</a></td>
          <td>${esc(t.kind || '—')}</td>
          <td>${pill(t.job_state, stateClass(t.job_state))}</td>
          <td class="num">${t.hot_rows !== undefined ? fmtInt(t.hot_rows) : fmtInt(hot.span)}</td>
          <td class="num">${fmtBytes(hot.bytes)}</td>
          <td class="num">${t.delta_version === null || t.delta_version === undefined ? '—' : 'v' + t.delta_version}</td>
          <td class="num lag-offsets">${fmtInt(t.lag_offsets)}${trend(t.table)}</td>
          <td class="num lag-seconds">${fmtDur(t.lag_seconds * 1000)}</td>
          <td class="num">${fmtDur(t.freshness_ms)}</td>
          <td class="num">${fmtInt(t.lake_files)}</td>
          <td class="num">${fmtBytes(t.lake_bytes)}</td>
          <td class="num">${c.commits ? fmtDur(c.recent_p50_ms) + ' / ' + fmtDur(c.recent_p99_ms) : '—'}</td>
          <td class="nowrap">${m.last_ms ? fmtAgo(m.last_ms) : '—'}</td>
          <td class="problem">${h.sev ? esc(h.reasons.join('; ')) : '<span class="ok">ok</span>'}</td></tr>`);
      }
      out.push('</tbody></table>');
      if (!rows.length) out.push(`<p class="muted">${tables.length ? 'No table matches the filter.' : 'No lake-enabled table yet.'}</p>`);
      $('#ov-tables', view).innerHTML = out.join('');
      const ms = performance.now() - t0;
      window.siltConsole.lastRenderMs = ms;
      $('#ov-render', view).textContent = `${rows.length} of ${tables.length} · rendered in ${ms.toFixed(1)} ms`;
      $('#tables-table', view).dataset.renderMs = ms.toFixed(1);
    }

    function renderJobs(jobs) {
      const sorted = jobs.slice().sort((a, b) => jobHealth(b) - jobHealth(a) || (a.name < b.name ? -1 : 1));
      $('#ov-jobs', view).innerHTML = jobsTable(sorted);
    }

    function renderCards(tables, jobs) {
      let bad = 0; let warn = 0; let maxLag = 0; let lagSum = 0;
      for (const t of tables) {
        const s = tableHealth(t).sev;
        if (s >= 3) bad++; else if (s === 2) warn++;
        maxLag = Math.max(maxLag, t.lag_seconds * 1000);
        lagSum += t.lag_offsets;
      }
      const running = jobs.filter((j) => j.state === 'running').length;
      const failing = jobs.filter((j) => jobHealth(j) >= 2).length;
      $('#ov-cards', view).innerHTML = [
        ['tables', fmtInt(tables.length)],
        ['unhealthy', `<span class="${bad ? 'err' : warn ? 'warn' : 'ok'}">${bad + warn}</span>`],
        ['max lag', fmtDur(maxLag)],
        ['lag offsets (sum)', fmtInt(lagSum)],
        ['jobs running', `${running} / ${jobs.length}`],
        ['jobs failing', `<span class="${failing ? 'err' : 'ok'}">${failing}</span>`],
      ].map(([k, v]) => `<div class="card"><div class="k">${k}</div><div class="v">${v}</div></div>`).join('');
    }

    return poller(async () => {
      const [tables, jobs] = await Promise.all([getJson('/v1/tables'), getJson('/v1/jobs')]);
      record(tables);
      last = { tables, jobs };
      renderCards(tables, jobs);
      renderTables(tables);
      renderJobs(jobs);
    }, 2000);
  }

  function jobsTable(jobs) {
    if (!jobs.length) return '<p class="muted">No submitted job. <a href="#/jobs">Submit one</a>.</p>';
    const out = [`<table class="grid" id="jobs-table"><thead><tr><th>job</th><th>state</th><th>desired</th>
      <th class="num">parallelism</th><th class="num">checkpoints</th><th class="num">failed</th><th>last checkpoint</th>
      <th class="num">restarts</th><th>submitted</th><th>failure</th></tr></thead><tbody>`];
    for (const j of jobs) {
      const cp = (j.checkpoints || [])[(j.checkpoints || []).length - 1];
      const par = Math.max(0, ...Object.values(j.parallelism || {}));
      out.push(`<tr class="sev-${jobHealth(j)}" data-job="${esc(j.id)}">
        <td><a href="#/job/${enc(j.id)}">${esc(j.name)}</a> <span class="muted mono">${esc(j.id)}</span></td>
        <td>${pill(j.state, stateClass(j.state))}</td><td>${esc(j.desired)}</td>
        <td class="num">${par || '—'}</td>
        <td class="num">${fmtInt(j.checkpoints_completed)}</td><td class="num">${fmtInt(j.checkpoints_failed)}</td>
        <td class="nowrap">${cp ? `#${cp.id} · ${fmtDur(cp.duration_ms)} · ${fmtBytes(cp.size_bytes)} · ${fmtAgo(cp.completed_at_ms)}` : '—'}</td>
        <td class="num">${fmtInt(j.restarts)}</td><td class="nowrap">${fmtAgo(j.submitted_at_ms)}</td>
        <td class="problem">${j.failure ? esc((j.failure_cause ? '[' + j.failure_cause + '] ' : '') + j.failure) : ''}</td></tr>`);
    }
    out.push('</tbody></table>');
    return out.join('');
  }

  // ---------------------------------------------------------------- Table page
  function tablePage(view, name) {
    view.innerHTML = `
      <h1>${esc(name)} <span class="sub" id="tb-sub"></span></h1>
      <div id="tb-problem"></div>
      <div class="cards" id="tb-cards"></div>
      <h2>Lag and freshness <span class="sub" id="tb-hist-note"></span></h2>
      <div class="charts">
        <div class="chart"><h3>tiering lag</h3><div id="ch-lag"></div></div>
        <div class="chart"><h3>freshness (age of the lake's newest commit)</h3><div id="ch-fresh"></div></div>
        <div class="chart"><h3>commit duration</h3><div id="ch-commit"></div></div>
      </div>
      <h2>Buckets</h2><div id="tb-buckets"></div>
      <h2>Verify <span class="sub">the changelog against the lake, as multisets (silt verify)</span></h2>
      <div class="panel"><div class="toolbar">
        <button id="verify-btn" class="primary">Verify</button>
        <label>deadline <input type="text" id="verify-deadline" value="60s" size="6"></label>
        <span id="verify-state" class="muted"></span></div><div id="verify-out"></div></div>
      <h2>Lake versions <span class="sub"><code>${esc(name)}$lake$snapshots</code></span></h2><div id="tb-versions"><p class="muted">Loading…</p></div>
      <h2>Schema and properties</h2><div id="tb-schema"><p class="muted">Loading…</p></div>`;
    const charts = {};
    let alive = true;
    let lastVersion;
    let verifyTimer = null;
    const path = '/v1/tables/' + enc(name);

    function chartData(rows) {
      const xs = []; const lagO = []; const lagS = []; const fresh = []; const commit = [];
      for (const s of rows) {
        xs.push(s.t_ms / 1000);
        lagO.push(s.lag_offsets ?? null);
        lagS.push(s.lag_ms === null || s.lag_ms === undefined ? null : s.lag_ms / 1000);
        fresh.push(s.freshness_ms === null || s.freshness_ms === undefined ? null : s.freshness_ms / 1000);
        commit.push(s.commit_ms ?? null);
      }
      return { lag: [xs, lagO, lagS], fresh: [xs, fresh], commit: [xs, commit] };
    }
    function ensureCharts() {
      if (charts.lag || typeof uPlot === 'undefined') return;
      const width = () => Math.max(300, $('#ch-lag', view).clientWidth - 4);
      const base = (series, axes, scales) => ({ width: width(), height: 200, series, axes, scales: Object.assign({ x: { time: true } }, scales || {}), legend: { live: true } });
      charts.lag = new uPlot(base(
        [{}, { label: 'lag (offsets)', stroke: '#1f6feb', width: 1.5, scale: 'off' }, { label: 'lag (s)', stroke: '#c62828', width: 1.5, scale: 's' }],
        [{}, { scale: 'off' }, { scale: 's', side: 1, grid: { show: false } }]), [[], [], []], $('#ch-lag', view));
      charts.fresh = new uPlot(base(
        [{}, { label: 'freshness (s)', stroke: '#1a7f37', width: 1.5 }], [{}, {}]), [[], []], $('#ch-fresh', view));
      charts.commit = new uPlot(base(
        [{}, { label: 'commit (ms)', stroke: '#8250df', width: 0, paths: () => null, points: { show: true, size: 5, fill: '#8250df' } }], [{}, {}]),
      [[], []], $('#ch-commit', view));
      charts.onResize = () => { for (const k of ['lag', 'fresh', 'commit']) charts[k].setSize({ width: width(), height: 200 }); };
      window.addEventListener('resize', charts.onResize);
    }

    async function loadHistory() {
      const since = Date.now() - 3600 * 1000;
      const r = await api('GET', `${path}/history?since_ms=${since}`);
      if (!alive) return;
      if (!r.ok || !r.json || !Array.isArray(r.json.samples)) {
        $('#tb-hist-note', view).textContent = `history: ${(r.json && r.json.error) || r.text || r.status}`;
        return;
      }
      const rows = r.json.samples;
      $('#tb-hist-note', view).textContent = `last hour, ${rows.length} samples kept by silt, one per ${fmtDur(r.json.interval_ms)}`;
      ensureCharts();
      if (charts.lag) {
        const d = chartData(rows);
        charts.lag.setData(d.lag); charts.fresh.setData(d.fresh); charts.commit.setData(d.commit);
      }
    }

    function renderStatus(t) {
      const h = tableHealth(t);
      const c = t.commits || {};
      const m = t.maintenance || {};
      $('#tb-sub', view).innerHTML = `${esc(t.kind || '')} ${pill('tiering ' + t.job_state, stateClass(t.job_state))} <span class="mono">${esc(t.lake_uri)}</span>`;
      $('#tb-problem', view).innerHTML = h.sev ? `<div class="banner ${h.sev >= 3 ? 'bad' : 'warn'}"><span class="title">Unhealthy:</span>${esc(h.reasons.join('; '))}</div>` : '';
      const card = (k, v, id) => `<div class="card"${id ? ` id="${id}"` : ''}><div class="k">${k}</div><div class="v">${v}</div></div>`;
      $('#tb-cards', view).innerHTML = [
        card('lag offsets', fmtInt(t.lag_offsets) + trend(t.table), 'card-lag-offsets'),
        card('lag', fmtDur(t.lag_seconds * 1000), 'card-lag-seconds'),
        card('freshness target', fmtDur(t.freshness_ms)),
        card('lake version', t.delta_version === null || t.delta_version === undefined ? '—' : 'v' + t.delta_version),
        card('commits', fmtInt(c.commits)),
        card('commit p50 / p99', `${fmtDur(c.recent_p50_ms)} / ${fmtDur(c.recent_p99_ms)}`),
        card('compactions', `${fmtInt(c.compactions)} <span class="muted" style="font-size:12px">${fmtInt(c.files_compacted)} files, ${fmtBytes(c.bytes_compacted)}</span>`),
        card('checkpoints / restarts', `${fmtInt(t.checkpoints)} / ${fmtInt(t.restarts)}`),
        card('lake files / bytes', `${fmtInt(t.lake_files)} / ${fmtBytes(t.lake_bytes)} <span class="muted" style="font-size:12px">${fmtInt(m.files_on_disk)} on disk at the last maintenance</span>`),
        card('maintenance', `${m.last_ms ? fmtAgo(m.last_ms) : 'not yet'} <span class="muted" style="font-size:12px">${fmtInt(m.files_deleted)} deleted, ${fmtBytes(m.bytes_reclaimed)} reclaimed</span>`),
      ].join('');
      const out = [`<table class="grid" id="buckets-table"><thead><tr><th>partition</th><th class="num">bucket</th>
        <th class="num">hot start</th><th class="num">high watermark</th><th class="num">lake offset</th><th class="num">lag</th>
        <th class="num">hot bytes</th><th class="num">segments</th><th>retention</th></tr></thead><tbody>`];
      for (const b of t.buckets || []) {
        out.push(`<tr><td>${b.partition !== undefined ? esc(b.partition) : b.partition_id !== undefined ? 'p' + b.partition_id : '—'}</td>
          <td class="num">${b.bucket}</td><td class="num">${b.log_start_offset !== undefined ? fmtInt(b.log_start_offset) : '—'}</td>
          <td class="num">${fmtInt(b.high_watermark)}</td><td class="num">${fmtInt(b.lake_offset)}</td>
          <td class="num">${fmtInt(b.high_watermark - b.lake_offset)}</td><td class="num">${fmtBytes(b.hot_bytes)}</td>
          <td class="num">${fmtInt(b.segments)}</td><td>${b.retention_held_by_tiering ? pill('held by tiering', 'warn') : b.hot_bytes !== undefined ? 'ok' : '<span class="muted">no run yet</span>'}</td></tr>`);
      }
      out.push('</tbody></table>');
      $('#tb-buckets', view).innerHTML = out.join('');
    }

    async function loadVersions() {
      const r = await query(`SELECT * FROM ${name}$lake$snapshots ORDER BY version DESC LIMIT 50`, '10s');
      if (!alive) return;
      const el = $('#tb-versions', view);
      if (!r.ok) { el.innerHTML = `<div class="banner bad">${esc((r.json && r.json.error) || r.text)}</div>`; return; }
      el.innerHTML = resultTable(r.json, 50, { bucket_offsets: fmtOffsetsCell });
    }

    async function loadSchema() {
      const r = await api('GET', path);
      if (!alive) return;
      const el = $('#tb-schema', view);
      if (!r.ok || !r.json || !r.json.schema) { el.innerHTML = `<div class="banner bad">${esc((r.json && r.json.error) || r.text)}</div>`; return; }
      const d = r.json;
      const pk = new Set(d.primary_key || []);
      const pks = new Set(d.partition_keys || []);
      const props = Object.entries(d.properties || {}).concat(Object.entries(d.custom_properties || {}).map(([k, v]) => [k + ' (custom)', v])).sort();
      el.innerHTML = `<table class="grid" style="width:auto" id="schema-table"><thead><tr><th>column</th><th>type</th><th>nullable</th><th>key</th></tr></thead><tbody>${
        d.schema.map((c) => `<tr><td class="mono">${esc(c.name)}</td><td class="mono">${esc(c.type)}</td><td>${c.nullable === false ? 'no' : 'yes'}</td><td>${pk.has(c.name) ? 'primary key' : ''}${pks.has(c.name) ? ' partition' : ''}</td></tr>`).join('')
      }</tbody></table><p class="muted">${esc(d.kind || '')} · ${fmtInt(d.bucket_count)} buckets${(d.bucket_keys || []).length ? ' by ' + esc(d.bucket_keys.join(', ')) : ''}</p>${
        props.length ? `<table class="grid" style="width:auto"><thead><tr><th>property</th><th>value</th></tr></thead><tbody>${
          props.map(([k, v]) => `<tr><td class="mono">${esc(k)}</td><td class="mono">${esc(v)}</td></tr>`).join('')}</tbody></table>` : ''}`;
    }

    // ---- verify: POST starts a run, GET follows it (see CONTRACT.md)
    function renderVerify(run) {
      const st = $('#verify-state', view);
      const out = $('#verify-out', view);
      const btn = $('#verify-btn', view);
      btn.disabled = run.state === 'running';
      if (run.state === 'running') {
        const p = run.progress || {};
        st.textContent = `running ${fmtDur(Date.now() - (run.started_ms || Date.now()))}: ${p.message || p.phase || ''}`;
        out.innerHTML = p.fraction !== undefined ? `<progress max="1" value="${Number(p.fraction)}" style="width:300px"></progress>` : '';
        return;
      }
      st.textContent = run.finished_ms ? `finished ${fmtAgo(run.finished_ms)}` : '';
      if (run.state === 'failed') { out.innerHTML = `<div class="banner bad"><span class="title">Verify failed:</span>${esc(run.error)}</div>`; return; }
      const r = run.result || {};
      const cls = r.verdict === 'match' ? 'ok' : r.verdict === 'mismatch' ? 'bad' : 'warn';
      out.innerHTML = `<div class="banner ${cls}" id="verify-verdict"><span class="title">${esc(String(r.verdict || '').toUpperCase().replace('_', ' '))}</span>
        lake v${esc(r.lake_version)} · hot ${fmtInt(r.hot_rows)} rows · lake ${fmtInt(r.lake_rows)} rows · missing ${fmtInt(r.missing)} · extra ${fmtInt(r.extra)} · differing ${fmtInt(r.differing)}${r.unchecked ? ' · unchecked ' + fmtInt(r.unchecked) : ''}${r.duplicate_keys ? ' · duplicate keys ' + fmtInt(r.duplicate_keys) : ''}</div>
        ${r.details && r.details.length ? `<pre>${esc(r.details.join('\n'))}</pre>` : ''}`;
    }
    async function followVerify() {
      if (!alive) return;
      const r = await api('GET', `${path}/verify`);
      if (!alive) return;
      if (r.ok && r.json) {
        renderVerify(r.json);
        if (r.json.state === 'running') verifyTimer = setTimeout(followVerify, 500);
      }
    }
    $('#verify-btn', view).addEventListener('click', async () => {
      const btn = $('#verify-btn', view);
      btn.disabled = true;
      const r = await api('POST', `${path}/verify`, { body: { deadline: $('#verify-deadline', view).value.trim() || undefined } });
      if (!alive) return;
      if (!r.ok && r.status !== 409) {
        btn.disabled = false;
        $('#verify-out', view).innerHTML = `<div class="banner bad">${esc((r.json && r.json.error) || r.text)}</div>`;
        return;
      }
      if (r.json) renderVerify(r.json);
      clearTimeout(verifyTimer);
      verifyTimer = setTimeout(followVerify, 300);
    });

    loadSchema().catch((e) => { $('#tb-schema', view).textContent = e.message; });
    followVerify().catch(() => {});
    const stop = poller(async () => {
      const tables = await getJson('/v1/tables');
      if (!alive) return;
      record(tables);
      const t = tables.find((x) => x.table === name);
      if (!t) { $('#tb-cards', view).innerHTML = `<div class="banner bad">No lake-enabled table ${esc(name)}.</div>`; return; }
      renderStatus(t);
      await loadHistory();
      if (t.delta_version !== lastVersion) { lastVersion = t.delta_version; await loadVersions(); }
    }, 2000);
    return () => {
      alive = false; stop(); clearTimeout(verifyTimer);
      if (charts.onResize) window.removeEventListener('resize', charts.onResize);
      for (const k of ['lag', 'fresh', 'commit']) if (charts[k]) charts[k].destroy();
    };
  }

  function fmtOffsetsCell(v) {
    try {
      const o = typeof v === 'string' ? JSON.parse(v) : v;
      return Object.keys(o).map((k) => `<span class="nowrap">${esc(k)}:${fmtInt(o[k])}</span>`).join(' ');
    } catch (_) { return esc(v); }
  }

  // A query result as a table, at most `max` rows shown. `cells` formats named columns.
  function resultTable(res, max, cells) {
    const cols = res.columns || [];
    const rows = res.rows || [];
    const n = Math.min(rows.length, max);
    const out = [`<div class="scroll"><table class="grid result"><thead><tr>${cols.map((c) => `<th title="${esc(c.type)}">${esc(c.name)}</th>`).join('')}</tr></thead><tbody>`];
    const numeric = cols.map((c) => /^(U?Int|Float|Decimal)/.test(c.type));
    for (let i = 0; i < n; i++) {
      const r = rows[i];
      let line = '<tr>';
      for (let j = 0; j < cols.length; j++) {
        const v = r[cols[j].name];
        const f = cells && cells[cols[j].name];
        line += `<td${numeric[j] ? ' class="num"' : ''}>${v === null || v === undefined ? '<span class="muted">null</span>' : f ? f(v) : esc(typeof v === 'object' ? JSON.stringify(v) : v)}</td>`;
      }
      out.push(line + '</tr>');
    }
    out.push('</tbody></table></div>');
    if (rows.length > n) out.push(`<p class="muted">showing the first ${fmtInt(n)} of ${fmtInt(rows.length)} rows</p>`);
    return out.join('');
  }

  // ---------------------------------------------------------------- Jobs: list and editor
  const EXAMPLES = {
    'pipeline (YAML)': `# A pipeline: a source, transforms, a sink. Validate checks it against the catalog.
source:    { type: fluss, table: demo.orders, start: earliest }
transform:
  - filter: amount > 10 AND status <> 'cancelled'
    projection: order_id, upper(status) AS status
sink:      { type: print }
pipeline:  { name: console-example, parallelism: 1, checkpoint: { interval: 2s } }
`,
    'definition (JSON)': `{
  "name": "console-fanout",
  "parallelism": 1,
  "checkpoint": { "interval_ms": 2000 },
  "operators": [
    { "name": "orders", "type": "fluss-source", "config": { "table": "demo.orders", "start": "latest" } },
    { "name": "paid", "type": "filter", "config": { "predicate": "status = 'paid'" } },
    { "name": "print", "type": "print-sink", "config": { "rows_per_batch_max": 5 } }
  ],
  "edges": [
    { "from": "orders", "to": "paid" },
    { "from": "paid", "to": "print" }
  ]
}
`,
  };
  const EDITOR_KEY = 'silt.console.editor';

  function jobsPage(view) {
    view.innerHTML = `
      <h1>Jobs</h1>
      <div id="jobs-list"><p class="muted">Loading…</p></div>
      <h2>Submit or validate <span class="sub">a YAML pipeline or a JSON job definition</span></h2>
      <div class="toolbar">
        <label>example <select id="ed-example"><option value="">—</option>${Object.keys(EXAMPLES).map((k) => `<option>${esc(k)}</option>`).join('')}</select></label>
        <span class="muted" id="ed-format"></span>
        <span style="flex:1"></span>
        <button id="ed-validate">Validate</button>
        <button id="ed-submit" class="primary">Submit</button>
      </div>
      <div class="editor"><div class="gutter" id="ed-gutter"></div><textarea id="ed-text" spellcheck="false" aria-label="job definition"></textarea></div>
      <div id="ed-result"></div>`;
    const ta = $('#ed-text', view);
    const gutter = $('#ed-gutter', view);
    let badLines = new Set();
    ta.value = sessionStorage.getItem(EDITOR_KEY) || EXAMPLES['pipeline (YAML)'];

    const isJson = () => ta.value.trimStart().startsWith('{');
    function paintGutter() {
      const n = ta.value.split('\n').length;
      const parts = [];
      for (let i = 1; i <= n; i++) parts.push(badLines.has(i) ? `<span class="bad">${i}</span>` : String(i));
      gutter.innerHTML = parts.join('\n');
      gutter.scrollTop = ta.scrollTop;
      $('#ed-format', view).textContent = isJson() ? 'JSON definition (application/json)' : 'YAML (application/yaml)';
    }
    ta.addEventListener('input', () => { badLines = new Set(); sessionStorage.setItem(EDITOR_KEY, ta.value); paintGutter(); });
    ta.addEventListener('scroll', () => { gutter.scrollTop = ta.scrollTop; });
    ta.addEventListener('keydown', (ev) => {
      if (ev.key === 'Tab') { ev.preventDefault(); ta.setRangeText('  ', ta.selectionStart, ta.selectionEnd, 'end'); }
    });
    $('#ed-example', view).addEventListener('change', (ev) => {
      if (!ev.target.value) return;
      ta.value = EXAMPLES[ev.target.value];
      ev.target.value = '';
      ta.dispatchEvent(new Event('input'));
    });
    paintGutter();

    async function send(submit) {
      const text = ta.value;
      const json = isJson();
      const res = $('#ed-result', view);
      res.innerHTML = '<p class="muted">…</p>';
      const r = await api('POST', submit ? '/v1/jobs' : '/v1/jobs/validate', { body: text, contentType: json ? 'application/json' : 'application/yaml' });
      if (r.ok) {
        badLines = new Set();
        paintGutter();
        if (submit && r.json && r.json.id) { location.hash = '#/job/' + enc(r.json.id); return; }
        const graph = (r.json && r.json.graph) || [];
        res.innerHTML = `<div class="banner ok"><span class="title">Valid.</span>The compiled graph:</div><div class="graph" id="ed-graph"></div><pre>${esc(Array.isArray(graph) ? graph.join('\n') : JSON.stringify(graph, null, 2))}</pre>`;
        const topo = (r.json && r.json.topology) || parseGraphText(Array.isArray(graph) ? graph : []);
        drawGraph($('#ed-graph', view), topo, null);
        return;
      }
      const errors = (r.json && r.json.errors) || [{ path: '', message: (r.json && r.json.error) || r.text || 'HTTP ' + r.status }];
      badLines = new Set();
      const items = errors.map((e, i) => {
        const at = errorLine(e, text, json);
        if (at) badLines.add(at.line);
        return `<li data-i="${i}"${at ? ` data-line="${at.line}"` : ''}>${at ? `<a href="#" class="line" data-line="${at.line}" title="${at.how === 'server' ? 'line given by silt' : at.how === 'message' ? 'line from the parser\'s message' : 'line located by the console from the path'}">line ${at.line}${at.col ? ':' + at.col : ''}</a>` : ''}<span class="at">${esc(e.path || '(document)')}</span>${esc(e.message)}</li>`;
      });
      paintGutter();
      res.innerHTML = `<div class="banner bad"><span class="title">${r.status === 400 ? (submit ? 'Not submitted' : 'Invalid') + ':' : 'HTTP ' + r.status + ':'}</span>${errors.length} problem${errors.length === 1 ? '' : 's'}</div><ul class="errors" id="ed-errors">${items.join('')}</ul>`;
      res.querySelectorAll('a.line').forEach((a) => a.addEventListener('click', (ev) => { ev.preventDefault(); selectLine(ta, Number(a.dataset.line)); }));
    }
    $('#ed-validate', view).addEventListener('click', () => send(false).catch((e) => { $('#ed-result', view).textContent = e.message; }));
    $('#ed-submit', view).addEventListener('click', () => send(true).catch((e) => { $('#ed-result', view).textContent = e.message; }));

    return poller(async () => {
      const jobs = await getJson('/v1/jobs');
      jobs.sort((a, b) => jobHealth(b) - jobHealth(a) || b.submitted_at_ms - a.submitted_at_ms);
      $('#jobs-list', view).innerHTML = jobsTable(jobs);
    }, 3000);
  }

  function selectLine(ta, line) {
    const lines = ta.value.split('\n');
    let start = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
    ta.focus();
    ta.setSelectionRange(start, start + (lines[line - 1] || '').length);
    ta.scrollTop = Math.max(0, (line - 5) * 18);
  }

  // Where an error is: the line silt gives (errors[].line), else "at line N column M" in
  // a parser's message, else the path (source.table, transform[1].filter, operators[2].config.x)
  // looked up in the text.
  function errorLine(e, text, json) {
    if (Number.isInteger(e.line) && e.line > 0) return { line: e.line, col: e.column, how: 'server' };
    const m = /at line (\d+) column (\d+)/.exec(e.message || '');
    if (m) return { line: Number(m[1]), col: Number(m[2]), how: 'message' };
    if (!e.path) return null;
    const off = locatePath(text, e.path, json);
    return off === null ? null : { line: text.slice(0, off).split('\n').length, how: 'path' };
  }

  function locatePath(text, path, json) {
    const segs = [];
    // silt may add a note after the path: "transform[1].projection (item 1)".
    path.replace(/\s*\(.*\)\s*$/, '').replace(/([^.[\]]+)|\[(\d+)\]/g, (_, key, idx) => { segs.push(idx !== undefined ? Number(idx) : key); return ''; });
    let pos = 0;
    let found = null;
    for (const seg of segs) {
      if (typeof seg === 'string') {
        const k = seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
        const re = json ? new RegExp(`"${k}"\\s*:`, 'g') : new RegExp(`(^|[\\s{,])${k}\\s*:`, 'gm');
        re.lastIndex = pos;
        const m = re.exec(text);
        if (!m) return found;
        pos = m.index + (json ? 0 : m[1].length);
        found = pos;
        pos = m.index + m[0].length;
      } else {
        const at = json ? nthJsonItem(text, pos, seg) : nthYamlItem(text, pos, seg);
        if (at === null) return found;
        pos = at;
        found = at;
      }
    }
    return found;
  }
  function nthYamlItem(text, pos, n) {
    const re = /^[ \t]*-[ \t]|[[,][ \t]*(?=\{)/gm;
    re.lastIndex = pos;
    let m;
    let i = 0;
    let flow = text.slice(pos).match(/^[ \t]*\[/);
    if (flow) { // flow sequence: count items by the commas at its depth
      return nthJsonItem(text, pos, n);
    }
    while ((m = re.exec(text))) { if (i++ === n) return m.index + m[0].length; }
    return null;
  }
  // The n-th item of the JSON (or YAML flow) array that starts after pos.
  function nthJsonItem(text, pos, n) {
    let i = text.indexOf('[', pos);
    if (i < 0) return null;
    let depth = 0; let inStr = false; let item = -1; let expect = true;
    for (; i < text.length; i++) {
      const c = text[i];
      if (inStr) { if (c === '\\') i++; else if (c === '"') inStr = false; continue; }
      if (c === '[' || c === '{') { depth++; if (depth === 2 && expect) { item++; expect = false; if (item === n) return i; } continue; }
      if (c === ']' || c === '}') { depth--; if (depth === 0) return null; continue; }
      if (c === '"') { if (depth === 1 && expect) { item++; expect = false; if (item === n) return i; } inStr = true; continue; }
      if (depth === 1 && c === ',') { expect = true; continue; }
      if (depth === 1 && expect && !/\s/.test(c)) { item++; expect = false; if (item === n) return i; }
    }
    return null;
  }

  // ---------------------------------------------------------------- job graph
  // The structured shape silt serves as job.topology (and in the validate answer):
  //   {operators: [{id, name, type, parallelism, description, vertices}], edges: [{from, to, partitioning}]}
  // From a silt without it, it is read from the text lines of job.graph.
  function parseGraphText(lines) {
    const operators = [];
    const edges = [];
    for (const line of lines || []) {
      let m = /^ {4}(\S+) -\[([^\]]*)\]-> (\S+)\s*$/.exec(line);
      if (m) { edges.push({ from: m[1], to: m[3], partitioning: m[2] }); continue; }
      m = /^ {2}(\S+)\s+x(\d+)\s+(\S+)\s*(.*)$/.exec(line);
      if (m) operators.push({ id: m[1], name: m[1], parallelism: Number(m[2]), type: m[3], description: m[4] });
    }
    return { operators, edges, fromText: true };
  }

  // Per graph operator: its metrics as silt sums them over the engine vertices it became (in
  // job.topology), else summed here from job.operators (a delta-sink is sink-writer and
  // sink-committer); and rates from the previous poll.
  function operatorMetrics(topo, ops, prev, dtMs) {
    const out = new Map();
    for (const op of topo.operators) {
      const m = op.records_in !== undefined ? {
        records_in: op.records_in, records_out: op.records_out, bytes_in: op.bytes_in, bytes_out: op.bytes_out,
        backpressured_ms: op.backpressured_ms, parallelism: op.parallelism, backpressure_ratio: op.backpressure_ratio,
      } : metricsFromVertices(op, ops);
      if (!m) continue;
      const p = prev && prev.get(op.id);
      if (p && dtMs > 0) {
        m.in_rate = ((m.records_in - p.records_in) * 1000) / dtMs;
        m.out_rate = ((m.records_out - p.records_out) * 1000) / dtMs;
        if (m.backpressure_ratio === undefined) m.backpressure_ratio = Math.min(1, Math.max(0, (m.backpressured_ms - p.backpressured_ms) / (dtMs * Math.max(1, m.parallelism))));
      }
      out.set(op.id, m);
    }
    return out;
  }

  // An operator's metrics from its engine vertices, for a silt whose topology has none.
  function metricsFromVertices(op, ops) {
    const vs = (ops || []).filter((o) => (op.vertices ? op.vertices.includes(o.name) : o.name === op.id || o.name.startsWith(op.id + '-')));
    if (!vs.length) return null;
    const first = vs[0];
    const last = vs[vs.length - 1];
    return {
      records_in: first.records_in, records_out: last.records_out === 0 && vs.length > 1 ? first.records_out : last.records_out,
      bytes_in: first.bytes_in, bytes_out: last.bytes_out,
      backpressured_ms: vs.reduce((s, o) => s + o.backpressured_ms, 0),
      parallelism: vs.reduce((s, o) => Math.max(s, o.parallelism), 0),
    };
  }

  function drawGraph(el, topo, metrics) {
    if (!el) return;
    if (typeof dagre === 'undefined' || !topo.operators.length) { el.innerHTML = '<p class="muted" style="padding:8px">No graph.</p>'; return; }
    const W = 250; const H = 78;
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: 'LR', nodesep: 22, ranksep: 70, marginx: 14, marginy: 14 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const op of topo.operators) g.setNode(op.id, { width: W, height: H });
    topo.edges.forEach((e, i) => {
      if (g.hasNode(e.from) && g.hasNode(e.to)) g.setEdge(e.from, e.to, { width: 8 * (e.partitioning || '').length, height: 14, labelpos: 'c' }, 'e' + i);
    });
    dagre.layout(g);
    const gw = Math.ceil(g.graph().width); const gh = Math.ceil(g.graph().height);
    const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${gw}" height="${gh}" viewBox="0 0 ${gw} ${gh}" role="img" aria-label="job graph">
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#8a96a3"/></marker></defs>`];
    const byId = new Map(topo.edges.map((e, i) => ['e' + i, e]));
    for (const ref of g.edges()) {
      const ed = g.edge(ref);
      const pts = ed.points || [];
      const d = pts.map((p, i) => (i ? 'L' : 'M') + p.x.toFixed(1) + ',' + p.y.toFixed(1)).join('');
      const e = byId.get(ref.name) || {};
      out.push(`<g class="edge" data-from="${esc(ref.v)}" data-to="${esc(ref.w)}"><path d="${d}" marker-end="url(#arrow)"/>${e.partitioning ? `<text x="${ed.x}" y="${ed.y - 3}" text-anchor="middle">${esc(e.partitioning)}</text>` : ''}</g>`);
    }
    const trunc = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);
    for (const op of topo.operators) {
      const n = g.node(op.id);
      const m = metrics && metrics.get(op.id);
      const bp = m && m.backpressure_ratio !== undefined ? m.backpressure_ratio : null;
      const level = bp === null ? 0 : bp >= 0.5 ? 3 : bp >= 0.2 ? 2 : bp >= 0.05 ? 1 : 0;
      const x = n.x - W / 2; const y = n.y - H / 2;
      const rate = (r) => (r === undefined ? '' : ` (${fmtInt(r)}/s)`);
      const l3 = m ? `in ${fmtInt(m.records_in)}${rate(m.in_rate)} · out ${fmtInt(m.records_out)}${rate(m.out_rate)}` : trunc(op.description || '', 40);
      const l4 = m ? `back-pressure ${bp === null ? '—' : Math.round(bp * 100) + '%'} · ${fmtBytes(m.bytes_out)} out` : '';
      out.push(`<g class="node bp-${level}" data-op="${esc(op.id)}" transform="translate(${x.toFixed(1)},${y.toFixed(1)})">
        <title>${esc(op.name + ' ' + (op.type || '') + ' ' + (op.description || ''))}</title>
        <rect width="${W}" height="${H}"/>
        <text class="t" x="10" y="18">${esc(trunc(op.name, 30))}</text>
        <text class="s" x="${W - 10}" y="18" text-anchor="end">${esc(op.type || '')} ×${esc(op.parallelism)}</text>
        <text x="10" y="40">${esc(l3)}</text>
        <text class="s" x="10" y="60">${esc(l4)}</text></g>`);
    }
    out.push('</svg>');
    el.innerHTML = out.join('');
  }

  // ---------------------------------------------------------------- Job page
  function jobPage(view, id) {
    view.innerHTML = `
      <h1 id="job-title">${esc(id)} <span class="sub" id="job-sub"></span></h1>
      <div id="job-failure"></div>
      <div class="toolbar">
        <button id="job-stop" title="Final checkpoint, then stop">Stop</button>
        <button id="job-cancel" class="danger" title="No final checkpoint">Cancel</button>
        <span id="job-action" class="muted"></span>
      </div>
      <div class="cards" id="job-cards"></div>
      <h2>Graph <span class="sub" id="job-graph-note"></span></h2><div class="graph" id="job-graph"></div>
      <h2>Operators</h2><div id="job-ops"></div>
      <h2>Checkpoints</h2><div id="job-cps"></div>`;
    let prev = null;
    let prevT = 0;
    let current = null;
    const path = '/v1/jobs/' + enc(id);
    const terminal = (s) => s === 'finished' || s === 'cancelled' || s === 'failed';

    function armed(btn, label, action) {
      // Two clicks: the first arms for 4 s (no browser confirm(), so tests drive it plainly).
      btn.addEventListener('click', async () => {
        if (!btn.dataset.armed) {
          btn.dataset.armed = '1'; btn.textContent = 'Confirm ' + label.toLowerCase() + '?';
          setTimeout(() => { delete btn.dataset.armed; btn.textContent = label; }, 4000);
          return;
        }
        delete btn.dataset.armed; btn.textContent = label; btn.disabled = true;
        $('#job-action', view).textContent = label + '…';
        const r = await action();
        $('#job-action', view).textContent = r.ok ? `${label.toLowerCase()}: ${r.json ? r.json.state : 'done'}` : `${label} failed: ${(r.json && r.json.error) || r.status}`;
        btn.disabled = false;
      });
    }
    armed($('#job-stop', view), 'Stop', () => api('POST', path + '/stop'));
    armed($('#job-cancel', view), 'Cancel', () => api('DELETE', path));

    function render(j) {
      const now = Date.now();
      current = j;
      $('#job-title', view).firstChild.textContent = j.name + ' ';
      $('#job-sub', view).innerHTML = `${pill(j.state, stateClass(j.state))} desired ${esc(j.desired)} · <span class="mono">${esc(j.id)}</span>`;
      $('#job-failure', view).innerHTML = j.failure ? `<div class="banner bad"><span class="title">Failed${j.failure_cause ? ' (' + esc(j.failure_cause) + ' to fix)' : ''}:</span>${esc(j.failure)}</div>` : '';
      $('#job-stop', view).disabled = terminal(j.state) || !!$('#job-stop', view).dataset.busy;
      $('#job-cancel', view).disabled = terminal(j.state);
      const cps = j.checkpoints || [];
      const last = cps[cps.length - 1];
      $('#job-cards', view).innerHTML = [
        ['submitted', fmtAgo(j.submitted_at_ms)], ['checkpoint interval', fmtDur(j.checkpoint_interval_ms)],
        ['checkpoints', `${fmtInt(j.checkpoints_completed)} <span class="muted" style="font-size:12px">${fmtInt(j.checkpoints_failed)} failed</span>`],
        ['last checkpoint', last ? `${fmtDur(last.duration_ms)} · ${fmtBytes(last.size_bytes)}` : '—'],
        ['restarts', fmtInt(j.restarts)], ['buffered', fmtBytes(j.buffered_bytes)],
      ].map(([k, v]) => `<div class="card"><div class="k">${k}</div><div class="v">${v}</div></div>`).join('');

      const topo = j.topology || parseGraphText(j.graph);
      const metrics = operatorMetrics(topo, j.operators, prev, now - prevT);
      prev = metrics; prevT = now;
      $('#job-graph-note', view).textContent = topo.fromText ? 'read from the text graph (job.topology not served by this silt)' : '';
      drawGraph($('#job-graph', view), topo, metrics);

      const ops = j.operators || [];
      $('#job-ops', view).innerHTML = `<table class="grid" id="ops-table"><thead><tr><th>operator</th><th class="num">parallelism</th>
        <th class="num">records in</th><th class="num">records out</th><th class="num">bytes in</th><th class="num">bytes out</th>
        <th class="num">back-pressured</th><th class="num">last checkpoint state</th><th class="num">last snapshot</th></tr></thead><tbody>${
        ops.map((o) => `<tr><td class="mono">${esc(o.name)}</td><td class="num">${o.parallelism}</td><td class="num">${fmtInt(o.records_in)}</td>
          <td class="num">${fmtInt(o.records_out)}</td><td class="num">${fmtBytes(o.bytes_in)}</td><td class="num">${fmtBytes(o.bytes_out)}</td>
          <td class="num">${fmtDur(o.backpressured_ms)}</td><td class="num">${fmtBytes(o.last_checkpoint_bytes)}</td><td class="num">${fmtDur(o.last_snapshot_ms)}</td></tr>`).join('')
      }</tbody></table>`;
      $('#job-cps', view).innerHTML = cps.length ? `<table class="grid" id="cps-table" style="width:auto"><thead><tr><th class="num">id</th><th>completed</th>
        <th class="num">duration</th><th class="num">size</th><th>final</th></tr></thead><tbody>${
        cps.slice().reverse().map((c) => `<tr><td class="num">${c.id}</td><td>${fmtTime(c.completed_at_ms)} <span class="muted">${fmtAgo(c.completed_at_ms)}</span></td>
          <td class="num">${fmtDur(c.duration_ms)}</td><td class="num">${fmtBytes(c.size_bytes)}</td><td>${c.is_final ? 'final' : ''}</td></tr>`).join('')
      }</tbody></table><p class="muted">the latest ${cps.length} of ${fmtInt(j.checkpoints_completed)}</p>` : '<p class="muted">No checkpoint yet.</p>';
    }

    return poller(async () => {
      const r = await api('GET', path);
      if (r.status === 404) { view.innerHTML = `<div class="banner bad">No job ${esc(id)}.</div><p><a href="#/jobs">Jobs</a></p>`; throw new Error('no job ' + id); }
      if (!r.ok) throw new Error(`${path}: ${r.status} ${(r.json && r.json.error) || ''}`);
      render(r.json);
      return current;
    }, 2000);
  }

  // ---------------------------------------------------------------- Query
  const SQL_KEY = 'silt.console.sql';
  const ROWS_SHOWN_MAX = 1000;
  function queryPage(view) {
    view.innerHTML = `
      <h1>Query <span class="sub">read-only SQL over <code>db.t</code>, <code>db.t$lake</code> and <code>db.t$lake$snapshots</code></span></h1>
      <textarea class="sql" id="q-sql" spellcheck="false" aria-label="SQL"></textarea>
      <div class="toolbar">
        <button id="q-run" class="primary" title="Ctrl+Enter">Run</button>
        <button id="q-explain">EXPLAIN</button>
        <button id="q-cancel" disabled>Cancel</button>
        <label>deadline <input type="text" id="q-deadline" value="30s" size="7" title="e.g. 50ms, 40s, 2min; empty: query.deadline_default_ms"></label>
        <label><input type="checkbox" id="q-wait"> wait for tiering</label>
        <span class="muted" id="q-examples"></span>
      </div>
      <div id="q-out"></div>`;
    const ta = $('#q-sql', view);
    ta.value = sessionStorage.getItem(SQL_KEY) || 'SELECT status, count(*) AS orders, sum(amount) AS amount FROM demo.orders GROUP BY status ORDER BY status';
    ta.addEventListener('input', () => sessionStorage.setItem(SQL_KEY, ta.value));
    let ctl = null;

    getJson('/v1/tables').then((tables) => {
      const t = tables[0] && tables[0].table;
      if (!t) return;
      const ex = [
        [`${t}`, `SELECT * FROM ${t} LIMIT 100`],
        [`${t}$lake`, `SELECT count(*) FROM ${t}$lake`],
        [`$lake$snapshots`, `SELECT * FROM ${t}$lake$snapshots ORDER BY version DESC LIMIT 20`],
      ];
      $('#q-examples', view).innerHTML = 'examples: ' + ex.map(([k], i) => `<a href="#" data-i="${i}">${esc(k)}</a>`).join(' · ');
      $('#q-examples', view).querySelectorAll('a').forEach((a) => a.addEventListener('click', (ev) => {
        ev.preventDefault(); ta.value = ex[Number(a.dataset.i)][1]; sessionStorage.setItem(SQL_KEY, ta.value);
      }));
    }).catch(() => {});

    async function run(explain) {
      const out = $('#q-out', view);
      let sql = ta.value.trim().replace(/;\s*$/, '');
      if (!sql) return;
      if (explain && !/^explain\b/i.test(sql)) sql = 'EXPLAIN ' + sql;
      if (ctl) ctl.abort();
      ctl = new AbortController();
      const deadline = $('#q-deadline', view).value.trim();
      $('#q-cancel', view).disabled = false;
      $('#q-run', view).disabled = true;
      const t0 = performance.now();
      out.innerHTML = `<p class="muted" id="q-running">running… (deadline ${esc(deadline || 'default')})</p>`;
      let r;
      try {
        r = await query(sql, deadline, { wait: $('#q-wait', view).checked, signal: ctl.signal });
      } catch (e) {
        out.innerHTML = `<div class="banner warn">${e.name === 'AbortError' ? 'Cancelled in the page (the server stops the query at its deadline).' : esc(e.message)}</div>`;
        return;
      } finally {
        $('#q-cancel', view).disabled = true; $('#q-run', view).disabled = false; ctl = null;
      }
      const wall = performance.now() - t0;
      if (!r.ok) {
        const kind = r.json && r.json.kind;
        const msg = (r.json && r.json.error) || r.text || 'HTTP ' + r.status;
        if (kind === 'deadline') {
          // "deadline of 50ms passed while executing: 13 of 24 lake files scanned (14 opened), 0 rows returned; ..."
          const m = /passed (.*?)(?:; |$)/.exec(msg);
          out.innerHTML = `<div class="banner warn" id="q-error" data-kind="deadline"><span class="title">Deadline passed.</span>${esc(msg)}</div>${m ? `<p>Progress when it was cancelled: <b id="q-progress">${esc(m[1])}</b></p>` : ''}`;
        } else if (kind === 'busy') {
          out.innerHTML = `<div class="banner warn" id="q-error" data-kind="busy"><span class="title">Busy, nothing ran:</span>${esc(msg)} Retry in ${esc((r.headers && r.headers.get('Retry-After')) || 1)} s.</div>`;
        } else {
          out.innerHTML = `<div class="banner bad" id="q-error" data-kind="${esc(kind || r.status)}"><span class="title">${kind === 'user' ? 'Error' : 'HTTP ' + r.status}:</span>${esc(msg)}</div>`;
        }
        return;
      }
      const res = r.json;
      const read = (res.tables || []).map((t) => `<span class="nowrap"><code>${esc(t.name)}</code> at lake v${esc(t.lake_version ?? '—')}` +
        `${Object.keys(t.lake_offsets || {}).length ? ` (lake ${fmtOffsetsCell(t.lake_offsets)}` + (Object.keys(t.high_watermarks || {}).length ? `; hot to ${fmtOffsetsCell(t.high_watermarks)}` : '') + ')' : ''}</span>`).join(', ');
      const head = `<p id="q-summary"><b id="q-rows">${fmtInt(res.row_count)}</b> row${res.row_count === 1 ? '' : 's'} · ${fmtDur(res.elapsed_ms)} in silt, ${fmtDur(wall)} in all${read ? ' · read ' + read : ''}</p>`;
      const cols = (res.columns || []).map((c) => c.name);
      if (cols.length === 2 && cols[0] === 'plan_type' && cols[1] === 'plan') {
        out.innerHTML = head + res.rows.map((x) => `<h2>${esc(x.plan_type)}</h2><pre>${esc(x.plan)}</pre>`).join('');
        return;
      }
      out.innerHTML = head + resultTable(res, ROWS_SHOWN_MAX);
    }
    $('#q-run', view).addEventListener('click', () => run(false));
    $('#q-explain', view).addEventListener('click', () => run(true));
    $('#q-cancel', view).addEventListener('click', () => { if (ctl) ctl.abort(); });
    ta.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); run(false); } });
    return () => { if (ctl) ctl.abort(); };
  }

  // ---------------------------------------------------------------- start
  window.siltConsole = { lastRenderMs: null, samples, parseGraphText, locatePath };
  function start() {
    $('#forget-token').hidden = !sessionStorage.getItem(TOKEN_KEY);
    $('#forget-token').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
    window.addEventListener('hashchange', route);
    route();
  }
  // ?fake=N: a fake API with N tables (fake.js), to try the console without silt.
  if (params.get('fake')) {
    const s = document.createElement('script');
    s.src = 'fake.js';
    s.onload = start;
    document.head.appendChild(s);
  } else {
    start();
  }
})();
