// sluice dashboard: applies the snapshots that /events streams to the page.
// Hand-written, no dependencies. The Go side lays the graph out; this file
// draws it as SVG and updates the numbers in place.
(function () {
  'use strict';

  var SVG = 'http://www.w3.org/2000/svg';
  // The geometry of a task box; dashboard/layout.go computes box heights
  // with the same numbers.
  var HEADER_H = 26, OP_H = 38, BAR_H = 18;
  var SPARK_N = 60, SPARK_W = 60, SPARK_H = 22;

  var jobsEl = document.getElementById('jobs');
  var emptyEl = document.getElementById('empty');
  var statusEl = document.getElementById('status');
  var updatedEl = document.getElementById('updated');
  var titleEl = document.getElementById('title');
  var views = new Map(); // job id -> view

  // ---- formatting ----

  function fmtCount(n) {
    if (n === undefined || n === null) return '';
    var a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(2) + 'G';
    if (a >= 1e6) return (n / 1e6).toFixed(2) + 'M';
    if (a >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    return String(Math.round(n));
  }
  function fmtRate(r) {
    if (!r) return '0/s';
    if (r < 10) return r.toFixed(1) + '/s';
    return fmtCount(r) + '/s';
  }
  function fmtMS(ms) {
    if (ms === undefined || ms === null || ms < 0) return '–';
    if (ms === 0) return '0 ms';
    if (ms < 1) return ms.toFixed(2) + ' ms';
    if (ms < 1000) return Math.round(ms) + ' ms';
    var s = ms / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    var m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + Math.floor(s % 60) + 's';
    return Math.floor(m / 60) + 'h ' + (m % 60) + 'm';
  }
  function fmtTime(iso) {
    if (!iso) return '–';
    var d = new Date(iso);
    if (isNaN(d.getTime())) return iso;
    return d.toISOString().replace('T', ' ').replace('Z', '').slice(0, 23);
  }

  // ---- DOM helpers ----

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setText(e, text) {
    if (e && e.textContent !== text) e.textContent = text;
  }
  function setValue(e, v) {
    if (e) e.setAttribute('data-value', String(v));
  }
  function fill(ratio) {
    return ratio >= 0.9 ? 'full' : ratio >= 0.5 ? 'warn' : '';
  }
  function fmtBytes(n) {
    if (!n) return '0 B';
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    if (n < 1024 * 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + ' MiB';
    return (n / 1024 / 1024 / 1024).toFixed(2) + ' GiB';
  }
  function pct(x) { return Math.round(100 * x) + '%'; }
  function byReason(m) {
    if (!m) return '';
    return Object.keys(m).sort().map(function (k) { return k + ' ' + fmtCount(m[k]); }).join(' · ');
  }

  // ---- one job ----

  function newView(job) {
    var sec = el('section', { 'class': 'job', 'data-job': job.id });
    var head = el('div', { 'class': 'job-head' });
    var h2 = el('h2', null, job.name);
    var badge = el('span', { 'class': 'badge', 'data-field': 'state' });
    var elapsed = el('span', { 'class': 'muted', 'data-field': 'elapsed' });
    head.append(h2, badge, elapsed);
    var err = el('div', { 'class': 'job-error', 'data-field': 'error' });

    var facts = el('div', { 'class': 'facts' });
    var f = {};
    [['restarts', 'restarts'], ['cp-completed', 'checkpoints'], ['cp-last', 'last checkpoint'],
      ['cp-duration', 'its duration'], ['cp-age', 'age'], ['cp-failed', 'failed checkpoints'],
      ['cp-restored', 'restored from'], ['cp-progress', 'in progress']].forEach(function (p) {
      var d = el('div', { 'class': 'fact' });
      d.append(el('span', { 'class': 'k' }, p[1]));
      f[p[0]] = el('span', { 'class': 'v', 'data-field': p[0] }, '–');
      d.append(f[p[0]]);
      facts.append(d);
    });

    var graph = el('div', { 'class': 'graph' });
    var legend = el('div', { 'class': 'legend' });
    [['sw-bp', 'task back-pressured (an instance without credit to send)'], ['sw-drop', 'task dropping records'],
      ['sw-hash', 'hash'], ['sw-forward', 'forward'], ['sw-rebalance', 'rebalance'], ['sw-broadcast', 'broadcast'],
      ['sw-busy', 'busy'], ['sw-blocked', 'back-pressured'], ['sw-idle', 'idle'], ['sw-hot', 'skewed instance']].forEach(function (p) {
      var item = el('span', { 'class': 'item' });
      item.append(el('span', { 'class': 'swatch ' + p[0] }), document.createTextNode(p[1]));
      legend.append(item);
    });
    var table = el('table', { 'class': 'ops' });
    var thead = el('thead');
    var hr = el('tr');
    [['operator'], ['task'], ['in'], ['in/s'], ['out'], ['out/s'], ['queue'], ['dropped'], ['spilled'],
      ['busy · back-pressured · idle', 'share of the last interval the instances spent handling records, waiting for credit to send, and waiting for input'],
      ['p50 · p99', 'latency over the last window: end to end (from ingestion at a source) at a sink; queue wait, then processing of the task, at a task\'s first operator'],
      ['late'], ['watermark'], ['dead', 'dead letters'], ['']].forEach(function (h) {
      var th = el('th', null, h[0]);
      if (h[1]) th.title = h[1];
      hr.append(th);
    });
    thead.append(hr);
    var tbody = el('tbody');
    table.append(thead, tbody);
    var wrap = el('div', { 'class': 'table-wrap' });
    wrap.append(table);
    // Checkpoints (in progress, then the completed ones, newest first) and
    // exceptions, side by side.
    var panels = el('div', { 'class': 'panels' });
    var cpPanel = el('div', { 'class': 'panel', 'data-panel': 'checkpoints' });
    cpPanel.append(el('h3', null, 'checkpoints'));
    var cpTable = el('table', { 'class': 'cps' });
    var cpHead = el('tr');
    ['id', 'completed', 'duration', 'size', 'states'].forEach(function (h) { cpHead.append(el('th', null, h)); });
    var cpTHead = el('thead');
    cpTHead.append(cpHead);
    var cpBody = el('tbody');
    cpTable.append(cpTHead, cpBody);
    var cpScroll = el('div', { 'class': 'scroll' });
    cpScroll.append(cpTable);
    var cpNone = el('p', { 'class': 'muted none' }, 'No checkpoint yet.');
    cpPanel.append(cpScroll, cpNone);
    var exPanel = el('div', { 'class': 'panel', 'data-panel': 'exceptions' });
    exPanel.append(el('h3', null, 'exceptions'));
    var exBody = el('div', { 'class': 'ex-body' });
    exPanel.append(exBody);
    panels.append(cpPanel, exPanel);
    var charts = el('div', { 'class': 'charts', 'data-panel': 'charts' });
    var tracePanel = el('div', { 'class': 'panel trace-panel', 'data-panel': 'trace', hidden: '' });
    var config = el('details', { 'class': 'panel config', 'data-panel': 'config' });
    config.append(el('summary', null, 'configuration and controls'));
    var cfgBody = el('div', { 'class': 'cfg-body' });
    config.append(cfgBody);
    sec.append(head, err, facts, graph, legend, tracePanel, wrap, charts, panels, config);
    var v = { id: job.id, name: job.name, sec: sec, badge: badge, elapsed: elapsed, err: err, facts: f, graph: graph,
      tbody: tbody, graphKey: '', rowsKey: '', rows: new Map(), svgOps: new Map(), svgTasks: new Map(),
      history: new Map(), expanded: new Set(), cpBody: cpBody, cpNone: cpNone, cpKey: '', exBody: exBody, exKey: '',
      charts: charts, chartViews: null, points: [], cfgBody: cfgBody, cfgKey: '', tracePanel: tracePanel, trace: null };
    newTracePanel(v);
    return v;
  }

  // drawGraph draws the tasks and edges the layout placed.
  function drawGraph(v, job) {
    var g = job.graph;
    v.svgOps.clear();
    v.svgTasks.clear();
    var svg = sv('svg', { width: g.width, height: g.height, viewBox: '0 0 ' + g.width + ' ' + g.height,
      'class': 'topology', 'data-job': job.id });
    var defs = sv('defs');
    var marker = sv('marker', { id: 'arrow-' + job.id, viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 8, markerHeight: 8, orient: 'auto-start-reverse' });
    marker.append(sv('path', { d: 'M0,0 L10,5 L0,10 z' }));
    defs.append(marker);
    svg.append(defs);

    var links = {};
    job.operators.forEach(function (op) { links[op.name] = op.traces_url; });

    (g.edges || []).forEach(function (e) {
      var dx = Math.max(30, (e.x2 - e.x1) / 2);
      var path = sv('path', {
        'class': 'edge ' + e.partition, 'data-from': e.from, 'data-to': e.to,
        d: 'M' + e.x1 + ',' + e.y1 + ' C' + (e.x1 + dx) + ',' + e.y1 + ' ' + (e.x2 - dx) + ',' + e.y2 + ' ' + e.x2 + ',' + e.y2,
        'marker-end': 'url(#arrow-' + job.id + ')'
      });
      svg.append(path);
      // The partitioning over the edge; the operator that chose it below.
      var mx = (e.x1 + e.x2) / 2, my = (e.y1 + e.y2) / 2;
      var label = sv('text', { 'class': 'edge-label', x: mx, y: my - 6, 'text-anchor': 'middle' }, e.partition);
      label.setAttribute('data-label', e.partition + (e.via ? ' (' + e.via + ')' : ''));
      svg.append(label);
      if (e.via) {
        svg.append(sv('text', { 'class': 'edge-label via', x: mx, y: my + 14, 'text-anchor': 'middle' }, e.via));
      }
    });

    (g.tasks || []).forEach(function (t) {
      var tg = sv('g', { 'class': 'task', 'data-task': t.id, transform: 'translate(' + t.x + ',' + t.y + ')' });
      tg.append(sv('rect', { 'class': 'box', width: t.w, height: t.h, rx: 6 }));
      tg.append(sv('rect', { 'class': 'head', x: 1, y: 1, width: t.w - 2, height: HEADER_H - 2, rx: 5 }));
      tg.append(sv('text', { 'class': 'task-label', x: 8, y: 17 }, 'task ' + t.id + (t.operators.length > 1 ? ' (fused)' : '')));
      tg.append(sv('text', { 'class': 'par', x: t.w - 8, y: 17, 'text-anchor': 'end' }, '×' + t.parallelism));
      var y = HEADER_H;
      var view = { g: tg };
      if (t.mailbox) {
        var bw = t.w - 16;
        tg.append(sv('rect', { 'class': 'q-bg', x: 8, y: y + 2, width: bw, height: BAR_H - 6, rx: 2 }));
        view.qFill = sv('rect', { 'class': 'q-fill', x: 8, y: y + 2, width: 0, height: BAR_H - 6, rx: 2 });
        view.qText = sv('text', { 'class': 'q-text', x: 12, y: y + 11 }, '');
        view.qWidth = bw;
        tg.append(view.qFill, view.qText);
        y += BAR_H;
      }
      t.operators.forEach(function (name, i) {
        var og = sv('g', { 'class': 'op', 'data-op': name, transform: 'translate(0,' + y + ')' });
        var title = sv('text', { 'class': 'op-name', x: 8, y: 15 });
        title.textContent = name;
        var kind = sv('tspan', { 'class': 'kind', dx: 6 }, t.kinds[i]);
        title.append(kind);
        if (links[name]) {
          var a = sv('a', { href: links[name], target: '_blank', rel: 'noopener' });
          a.append(sv('title', null, 'traces of ' + name + ' in Jaeger'));
          a.append(title);
          og.append(a);
        } else {
          og.append(title);
        }
        var rates = sv('text', { 'class': 'rates', x: 8, y: 31, 'data-field': 'rates' }, '');
        var alert = sv('text', { 'class': 'alert', x: t.w - 8, y: 31, 'text-anchor': 'end', 'data-field': 'alert' }, '');
        og.append(rates, alert);
        tg.append(og);
        v.svgOps.set(name, { rates: rates, alert: alert });
        y += OP_H;
      });
      v.svgTasks.set(t.id, view);
      svg.append(tg);
    });
    v.graph.replaceChildren(svg);
    v.svgJob = job;
    if (v.trace) drawTracePath(v, v.trace);
  }

  function newRow(v, op, links) {
    var tr = el('tr', { 'data-op': op.name, 'data-task': op.task });
    if (!op.head) tr.className = 'fused';
    var cells = {};
    function td(field, cls) {
      var c = el('td', { 'data-field': field });
      if (cls) c.className = cls;
      tr.append(c);
      cells[field] = c;
      return c;
    }
    var name = td('name', 'name');
    cells.toggle = el('button', { type: 'button', 'class': 'toggle', 'data-op': op.name, 'aria-expanded': 'false',
      title: 'show the ' + op.parallelism + ' instances' }, '▸');
    cells.toggle.addEventListener('click', function () { toggleInstances(v, op.name); });
    cells.skew = el('span', { 'class': 'skew', 'data-field': 'skew', hidden: '' });
    name.append(cells.toggle, el('b', null, op.name), el('span', { 'class': 'kind' }, op.kind), cells.skew);
    td('task', 'num').textContent = op.task + ' ×' + op.parallelism;
    td('in', 'num');
    var inRate = td('in_rate', 'num');
    cells.inText = el('span');
    cells.spark = sv('svg', { 'class': 'spark', width: SPARK_W, height: SPARK_H });
    cells.sparkLine = sv('polyline', { points: '' });
    cells.spark.append(cells.sparkLine);
    inRate.append(cells.inText, cells.spark);
    td('out', 'num');
    td('out_rate', 'num');
    var q = td('queue');
    if (op.head && op.capacity > 0) {
      cells.bar = el('div', { 'class': 'bar', 'data-field': 'queue-bar' });
      cells.barFill = el('div', { 'class': 'fill' });
      cells.barText = el('div', { 'class': 'txt' });
      cells.bar.append(cells.barFill, cells.barText);
      cells.policy = el('span', { 'class': 'sub' });
      q.append(cells.bar, cells.policy);
    }
    td('dropped', 'num');
    td('spilled', 'num');
    var sh = td('backpressure', 'shares-cell');
    if (op.head) shareBar(cells, sh);
    td('latency', 'num');
    td('late', 'num');
    td('watermark', 'num');
    td('dead_lettered', 'num');
    var tl = td('traces');
    if (op.traces_url) {
      tl.append(el('a', { 'class': 'traces', href: op.traces_url, target: '_blank', rel: 'noopener',
        title: 'spans of ' + op.name + ' in Jaeger' }, 'traces ↗'));
    }
    return { tr: tr, cells: cells, inst: [] };
  }

  // shareBar puts a bar of busy / back-pressured / idle shares into cell.
  function shareBar(cells, cell) {
    cells.shares = el('div', { 'class': 'shares', 'data-field': 'shares' });
    cells.shBusy = el('span', { 'class': 'sh busy' });
    cells.shBlocked = el('span', { 'class': 'sh blocked' });
    cells.shIdle = el('span', { 'class': 'sh idle' });
    cells.shares.append(cells.shBusy, cells.shBlocked, cells.shIdle);
    cells.shText = el('span', { 'class': 'sub' });
    cell.append(cells.shares, cells.shText);
  }

  function setShares(cells, busy, blocked, idle) {
    if (!cells.shares) return;
    var known = busy >= 0, measured = blocked >= 0;
    var b = known ? busy : 0, k = measured ? blocked : 0, i = known ? idle : 0;
    cells.shBusy.style.width = (100 * b).toFixed(1) + '%';
    cells.shBlocked.style.width = (100 * k).toFixed(1) + '%';
    cells.shIdle.style.width = (100 * i).toFixed(1) + '%';
    cells.shares.setAttribute('data-busy', String(busy));
    cells.shares.setAttribute('data-blocked', String(blocked));
    cells.shares.setAttribute('data-idle', String(idle));
    cells.shares.classList.toggle('unknown', !measured);
    var text = !measured ? '–' : known ? pct(b) + ' · ' + pct(k) + ' · ' + pct(i) : pct(k) + ' back-pressured';
    setText(cells.shText, text);
  }

  function toggleInstances(v, name) {
    var open = !v.expanded.has(name);
    if (open) v.expanded.add(name); else v.expanded.delete(name);
    var r = v.rows.get(name);
    if (!r) return;
    r.cells.toggle.setAttribute('aria-expanded', String(open));
    setText(r.cells.toggle, open ? '▾' : '▸');
    r.inst.forEach(function (ir) { ir.tr.hidden = !open; });
  }

  // newInstanceRow is a row for instance i of op, under its operator's.
  function newInstanceRow(v, op, i) {
    var tr = el('tr', { 'class': 'instance', 'data-op': op.name, 'data-instance': String(i) });
    tr.hidden = !v.expanded.has(op.name);
    var cells = {};
    function td(field, cls) {
      var c = el('td', { 'data-field': field });
      if (cls) c.className = cls;
      tr.append(c);
      cells[field] = c;
      return c;
    }
    td('name', 'name inst-name');
    td('task', 'num');
    td('in', 'num'); td('in_rate', 'num'); td('out', 'num'); td('out_rate', 'num');
    td('queue', 'num'); td('dropped', 'num'); td('spilled', 'num');
    var sh = td('backpressure', 'shares-cell');
    if (op.head) shareBar(cells, sh);
    td('latency', 'num'); td('late', 'num'); td('watermark', 'num'); td('dead_lettered', 'num'); td('traces');
    return { tr: tr, cells: cells };
  }

  function updateInstances(v, r, op) {
    var insts = op.instances || [];
    while (r.inst.length < insts.length) {
      var ir = newInstanceRow(v, op, r.inst.length);
      var after = r.inst.length ? r.inst[r.inst.length - 1].tr : r.tr;
      after.after(ir.tr);
      r.inst.push(ir);
    }
    r.cells.toggle.hidden = insts.length === 0;
    insts.forEach(function (in_, i) {
      var c = r.inst[i].cells;
      r.inst[i].tr.classList.toggle('hot', !!in_.hot);
      setText(c.name, '#' + in_.index + (in_.host ? ' @ ' + in_.host : '') + (in_.hot ? ' ▲ hot' : ''));
      setText(c.in, fmtCount(in_.in)); setValue(c.in, in_.in);
      setText(c.in_rate, fmtRate(in_.in_rate)); setValue(c.in_rate, in_.in_rate);
      setText(c.out, fmtCount(in_.out)); setValue(c.out, in_.out);
      setText(c.out_rate, fmtRate(in_.out_rate));
      if (op.head && in_.capacity > 0) {
        setText(c.queue, fmtCount(in_.queued) + ' / ' + fmtCount(in_.capacity)); setValue(c.queue, in_.queued);
      }
      if (op.head) { setText(c.dropped, fmtCount(in_.dropped)); setValue(c.dropped, in_.dropped); }
      setShares(c, in_.busy, in_.blocked, in_.idle);
      if (c.shares) c.shares.classList.toggle('bp-now', !!in_.backpressured);
      setText(c.watermark, in_.watermark ? fmtTime(in_.watermark).slice(11) : '');
    });
  }

  function updateCheckpoints(v, cp) {
    var hist = cp.history || [], pend = cp.pending || [];
    var key = JSON.stringify([hist.map(function (h) { return h.id; }), pend]);
    v.cpNone.hidden = hist.length + pend.length > 0;
    v.cpBody.parentNode.hidden = !v.cpNone.hidden;
    if (key === v.cpKey) return;
    v.cpKey = key;
    var rows = [];
    pend.forEach(function (p) {
      var tr = el('tr', { 'class': 'pending', 'data-checkpoint': String(p.id), 'data-state': 'in-progress' });
      tr.append(el('td', { 'class': 'num' }, '#' + p.id),
        el('td', { colspan: 4 }, 'in progress for ' + fmtMS(p.since_ms) + ' · ' + p.acked + ' of ' + (p.acked + p.waiting) + ' instances acknowledged'));
      rows.push(tr);
    });
    hist.forEach(function (h) {
      var tr = el('tr', { 'data-checkpoint': String(h.id), 'data-state': 'completed' });
      tr.append(el('td', { 'class': 'num' }, '#' + h.id), el('td', { 'class': 'num' }, fmtTime(h.time).slice(11)),
        el('td', { 'class': 'num' }, fmtMS(h.duration_ms)), el('td', { 'class': 'num' }, fmtBytes(h.size)),
        el('td', { 'class': 'num' }, String(h.states)));
      rows.push(tr);
    });
    v.cpBody.replaceChildren.apply(v.cpBody, rows);
  }

  function updateExceptions(v, ex) {
    var key = JSON.stringify(ex);
    if (key === v.exKey) return;
    v.exKey = key;
    var parts = [];
    var restarts = ex.restarts || [];
    if (ex.error) {
      var e = el('div', { 'class': 'exception failure', 'data-kind': 'failure' });
      e.append(el('span', { 'class': 'k' }, 'job failed'), el('pre', null, ex.error));
      parts.push(e);
    }
    if (restarts.length) {
      var t = el('table', { 'class': 'restarts' });
      var hr = el('tr');
      ['restarted at', 'after', 'cause'].forEach(function (h) { hr.append(el('th', null, h)); });
      t.append(hr);
      restarts.slice().reverse().forEach(function (r) {
        var tr = el('tr', { 'class': 'exception', 'data-kind': 'restart' });
        tr.append(el('td', { 'class': 'num' }, fmtTime(r.time).slice(11)), el('td', { 'class': 'num' }, fmtMS(r.delay_ms)),
          el('td', { 'class': 'cause' }, r.error));
        t.append(tr);
      });
      parts.push(t);
    }
    if (ex.checkpoint_failure) {
      var c = el('div', { 'class': 'exception', 'data-kind': 'checkpoint' });
      c.append(el('span', { 'class': 'k' }, 'last failed checkpoint'), el('pre', null, ex.checkpoint_failure));
      parts.push(c);
    }
    var dl = ex.dead_letters || {};
    var names = Object.keys(dl).sort();
    if (names.length) {
      var d = el('div', { 'class': 'exception', 'data-kind': 'dead-letters' });
      d.append(el('span', { 'class': 'k' }, 'dead letters'),
        el('span', null, names.map(function (n) { return n + ' ' + fmtCount(dl[n]); }).join(' · ')));
      parts.push(d);
    }
    var recent = (ex.recent_dead_letters || []).slice(0, 20);
    if (recent.length) {
      var rt = el('table', { 'class': 'restarts dead-letters' });
      var rh = el('tr');
      ['seq', 'at', 'operator', 'attempts', 'failure'].forEach(function (h) { rh.append(el('th', null, h)); });
      rt.append(rh);
      recent.forEach(function (d) {
        var tr = el('tr', { 'class': 'exception', 'data-kind': 'dead-letter', 'data-seq': String(d.seq) });
        tr.append(el('td', { 'class': 'num' }, String(d.seq)), el('td', { 'class': 'num' }, fmtTime(d.time).slice(11)),
          el('td', null, d.operator + ' #' + d.instance), el('td', { 'class': 'num' }, String(d.attempts)),
          el('td', { 'class': 'cause' }, d.error));
        rt.append(tr);
      });
      parts.push(rt);
    }
    if (!parts.length) parts.push(el('p', { 'class': 'muted none' }, 'No failure, restart or dead letter.'));
    v.exBody.replaceChildren.apply(v.exBody, parts);
  }

  function spark(v, op, cells) {
    var h = v.history.get(op.name);
    if (!h) { h = []; v.history.set(op.name, h); }
    h.push(op.in_rate || 0);
    if (h.length > SPARK_N) h.shift();
    var top = Math.max.apply(null, h) || 1;
    var step = SPARK_W / SPARK_N;
    var pts = h.map(function (r, i) {
      return ((SPARK_N - h.length + i) * step).toFixed(1) + ',' + (SPARK_H - 1 - (SPARK_H - 2) * r / top).toFixed(1);
    });
    cells.sparkLine.setAttribute('points', pts.join(' '));
  }

  // ---- latency ----

  function setLatency(cell, op) {
    var p = op.end_to_end || op.queue_wait, proc = op.end_to_end ? null : op.processing;
    if (!p && !proc) { setText(cell, '–'); setValue(cell, -1); cell.title = ''; return; }
    var parts = [];
    if (p) parts.push(fmtMS(p.p50) + ' · ' + fmtMS(p.p99));
    if (proc) parts.push('+ ' + fmtMS(proc.p99));
    setText(cell, parts.join(' '));
    setValue(cell, p ? p.p99 : proc.p99);
    var what = op.end_to_end ? 'end to end' : 'queue wait';
    cell.title = (p ? what + ': p50 ' + fmtMS(p.p50) + ', p95 ' + fmtMS(p.p95) + ', p99 ' + fmtMS(p.p99) + ', max ' + fmtMS(p.max) + ' over ' + fmtCount(p.count) + ' records' : '') +
      (proc ? (p ? '\n' : '') + 'processing of the task: p50 ' + fmtMS(proc.p50) + ', p99 ' + fmtMS(proc.p99) + ', max ' + fmtMS(proc.max) : '');
  }

  // ---- charts over the last minutes ----

  var MAX_POINTS = 1200;
  var PALETTE = ['#2f6fdb', '#d2413a', '#2e9d5b', '#d98a1c', '#8a4fd0', '#1aa3a3', '#b3477d', '#6b7483', '#7a9a1f', '#c0612b'];
  var CHART_W = 372, CHART_H = 120, PAD_L = 44, PAD_B = 16, PAD_T = 8;
  var JOB_CHARTS = [
    { key: 'in', title: 'records in /s', fmt: fmtRate, heads: false },
    { key: 'q', title: 'queue depth (records)', fmt: fmtCount, heads: true },
    { key: 'bp', title: 'back-pressured share', fmt: pct, heads: true, max1: true },
    { key: 'lag', title: 'watermark lag', fmt: fmtMS, heads: false, skipNeg: true },
    { key: 'p99', title: 'latency p99 (sinks: end to end; inputs: queue wait)', fmt: fmtMS, heads: false, skipNeg: true }
  ];
  var PROC_CHARTS = [
    { key: 'heap', title: 'heap', fmt: fmtBytes },
    { key: 'cpu', title: 'CPU (cores)', fmt: function (x) { return x.toFixed(2); }, skipNeg: true },
    { key: 'goroutines', title: 'goroutines', fmt: fmtCount },
    { key: 'gc_pause_ms', title: 'GC pause p99', fmt: fmtMS }
  ];

  function addPoints(v, job) {
    if (job.history && job.history.points) {
      v.points = job.history.points.slice(-MAX_POINTS);
      v.pointOps = job.history.operators;
    }
    var p = job.point;
    if (p && (!v.points.length || p.t > v.points[v.points.length - 1].t)) {
      v.points.push(p);
      if (v.points.length > MAX_POINTS) v.points.shift();
    }
  }

  function newChart(def) {
    var box = el('div', { 'class': 'chart', 'data-chart': def.key });
    box.append(el('div', { 'class': 'chart-title' }, def.title));
    var svg = sv('svg', { 'class': 'chart-svg', width: CHART_W, height: CHART_H, viewBox: '0 0 ' + CHART_W + ' ' + CHART_H, 'data-chart': def.key });
    svg.append(sv('line', { 'class': 'axis', x1: PAD_L, y1: CHART_H - PAD_B, x2: CHART_W - 4, y2: CHART_H - PAD_B }));
    svg.append(sv('line', { 'class': 'axis', x1: PAD_L, y1: PAD_T, x2: PAD_L, y2: CHART_H - PAD_B }));
    var top = sv('text', { 'class': 'tick', x: PAD_L - 4, y: PAD_T + 8, 'text-anchor': 'end' }, '');
    var zero = sv('text', { 'class': 'tick', x: PAD_L - 4, y: CHART_H - PAD_B, 'text-anchor': 'end' }, '0');
    var span = sv('text', { 'class': 'tick', x: CHART_W - 4, y: CHART_H - 3, 'text-anchor': 'end' }, '');
    var lines = sv('g', { 'class': 'lines' });
    svg.append(top, zero, span, lines);
    var legend = el('div', { 'class': 'chart-legend' });
    box.append(svg, legend);
    return { def: def, box: box, svg: svg, top: top, span: span, lines: lines, legend: legend, key: '' };
  }

  // plot draws series (name -> [[t, value]...]) into chart c over [t0, t1].
  function plot(c, series, t0, t1) {
    var names = Object.keys(series);
    var key = names.join('|');
    var top = 0;
    names.forEach(function (n) { series[n].forEach(function (p) { if (p[1] > top) top = p[1]; }); });
    if (c.def.max1) top = 1;
    if (!(top > 0)) top = 1;
    var w = CHART_W - PAD_L - 6, h = CHART_H - PAD_B - PAD_T, dt = Math.max(t1 - t0, 1);
    if (key !== c.key) {
      c.key = key;
      c.lines.replaceChildren();
      c.legend.replaceChildren();
      c.poly = {};
      names.forEach(function (n, i) {
        var color = PALETTE[i % PALETTE.length];
        var pl = sv('polyline', { 'data-op': n, stroke: color, fill: 'none', points: '' });
        c.lines.append(pl);
        c.poly[n] = pl;
        var item = el('span', { 'class': 'item' });
        item.append(el('span', { 'class': 'swatch', style: 'background:' + color }), document.createTextNode(n));
        c.legend.append(item);
      });
    }
    var total = 0, n = 0;
    names.forEach(function (name) {
      var pts = series[name].map(function (p) {
        return (PAD_L + w * (p[0] - t0) / dt).toFixed(1) + ',' + (PAD_T + h - h * Math.min(p[1] / top, 1)).toFixed(1);
      });
      c.poly[name].setAttribute('points', pts.join(' '));
      var last = series[name][series[name].length - 1];
      if (last) { total += last[1]; n = Math.max(n, series[name].length); }
    });
    setText(c.top, c.def.fmt(top));
    setText(c.span, 'last ' + fmtMS(t1 - t0));
    c.svg.setAttribute('data-points', String(n));
    c.svg.setAttribute('data-last', String(total));
  }

  function drawCharts(v, job) {
    if (!v.chartViews) {
      v.chartViews = JOB_CHARTS.map(newChart);
      v.charts.replaceChildren.apply(v.charts, v.chartViews.map(function (c) { return c.box; }));
    }
    var pts = v.points;
    if (!pts.length) return;
    var names = job.operators.map(function (o) { return o.name; });
    var heads = {};
    job.operators.forEach(function (o) { heads[o.name] = o.head && o.capacity > 0; });
    var t0 = pts[0].t, t1 = pts[pts.length - 1].t;
    v.chartViews.forEach(function (c) {
      var series = {};
      names.forEach(function (name, i) {
        if (c.def.heads && !heads[name]) return;
        var s = [];
        pts.forEach(function (p) {
          var o = p.ops && p.ops[i];
          if (!o) return;
          var val = o[c.def.key];
          if (c.def.skipNeg && !(val >= 0)) return;
          s.push([p.t, val || 0]);
        });
        if (c.def.skipNeg && !s.length) return;
        series[name] = s;
      });
      plot(c, series, t0, t1);
    });
  }

  // ---- the process ----

  var procEl = null, procFacts = {}, procCharts = null, procPoints = [], lastSnap = null;

  function updateProcess(snap) {
    if (!procEl) {
      procEl = el('section', { 'class': 'process', 'data-panel': 'process' });
      var head = el('div', { 'class': 'job-head' });
      head.append(el('h2', null, 'process'), el('span', { 'class': 'muted' }, 'this process, from Go\'s runtime/metrics'));
      var facts = el('div', { 'class': 'facts' });
      [['heap', 'heap'], ['total', 'Go memory'], ['goroutines', 'goroutines'], ['gc', 'GC cycles'],
        ['pause', 'GC pause p99'], ['cpu', 'CPU'], ['gccpu', 'GC share of CPU']].forEach(function (p) {
        var d = el('div', { 'class': 'fact' });
        d.append(el('span', { 'class': 'k' }, p[1]));
        procFacts[p[0]] = el('span', { 'class': 'v', 'data-field': 'proc-' + p[0] }, '–');
        d.append(procFacts[p[0]]);
        facts.append(d);
      });
      var charts = el('div', { 'class': 'charts' });
      procCharts = PROC_CHARTS.map(newChart);
      charts.append.apply(charts, procCharts.map(function (c) { return c.box; }));
      procEl.append(head, facts, charts);
      jobsEl.prepend(procEl);
    }
    var p = snap.process || {};
    setText(procFacts.heap, fmtBytes(p.heap_bytes)); setValue(procFacts.heap, p.heap_bytes || 0);
    setText(procFacts.total, fmtBytes(p.total_bytes));
    setText(procFacts.goroutines, fmtCount(p.goroutines)); setValue(procFacts.goroutines, p.goroutines || 0);
    setText(procFacts.gc, fmtCount(p.gc_cycles));
    setText(procFacts.pause, fmtMS(p.gc_pause_p99_ms));
    setText(procFacts.cpu, p.cpu >= 0 ? p.cpu.toFixed(2) + ' of ' + p.gomaxprocs + ' cores' : '–');
    setText(procFacts.gccpu, p.gc_cpu >= 0 ? pct(p.gc_cpu) : '–');
    if (snap.process_history) procPoints = snap.process_history.slice(-MAX_POINTS);
    var pp = snap.process_point;
    if (pp && (!procPoints.length || pp.t > procPoints[procPoints.length - 1].t)) {
      procPoints.push(pp);
      if (procPoints.length > MAX_POINTS) procPoints.shift();
    }
    if (!procPoints.length) return;
    var t0 = procPoints[0].t, t1 = procPoints[procPoints.length - 1].t;
    procCharts.forEach(function (c) {
      var s = [];
      procPoints.forEach(function (q) { var val = q[c.def.key]; if (!(c.def.skipNeg && !(val >= 0))) s.push([q.t, val || 0]); });
      var series = {};
      series[c.def.title] = s;
      plot(c, series, t0, t1);
    });
  }

  // ---- configuration and controls ----

  var POLICIES = ['block', 'drop-newest', 'drop-oldest', 'sample', 'throttle', 'spill'];
  // The admin token the user pasted: kept in this page's memory only (never
  // stored, never in the page the server sends), sent as a bearer token.
  var adminToken = '';

  function ctlResult(v, text, status) {
    setText(v.ctlOut, text);
    v.ctlOut.setAttribute('data-status', String(status));
    v.ctlOut.className = 'ctl-result ' + (status >= 200 && status < 300 ? 'ok' : 'bad');
  }

  // control calls the admin API under admin/ with the pasted token.
  function control(v, method, path, body) {
    var headers = { 'Content-Type': 'application/json' };
    if (adminToken) headers['Authorization'] = 'Bearer ' + adminToken;
    var url = 'admin/v1/jobs/' + encodeURIComponent(v.name) + path;
    fetch(url, { method: method, headers: headers, body: body ? JSON.stringify(body) : undefined, credentials: 'omit' })
      .then(function (resp) {
        return resp.text().then(function (text) {
          var msg = text;
          try { var j = JSON.parse(text); msg = j.error || JSON.stringify(j); } catch (e) { /* plain text */ }
          ctlResult(v, method + ' ' + path + ': ' + resp.status + ' ' + resp.statusText + (msg ? ' — ' + msg : ''), resp.status);
        });
      })
      .catch(function (e) { ctlResult(v, method + ' ' + path + ': ' + e, 0); });
  }

  function updateConfig(v, job, snap) {
    var c = job.config || {};
    var key = JSON.stringify(c) + '|' + !!snap.controls;
    if (key === v.cfgKey) return;
    v.cfgKey = key;
    var parts = [];
    var facts = el('table', { 'class': 'cfg' });
    [['batch size', c.batch_size], ['default capacity', c.capacity],
      ['checkpoints', c.checkpoint_interval ? 'every ' + c.checkpoint_interval + ', ' + c.checkpoint_mode +
        (c.checkpoint_timeout ? ', timeout ' + c.checkpoint_timeout : '') + (c.max_concurrent > 1 ? ', ' + c.max_concurrent + ' at once' : '') +
        (c.min_pause ? ', pause ' + c.min_pause : '') : 'none'],
      ['checkpoint store', c.checkpoint_store], ['from savepoint', c.savepoint], ['dead letters', c.dead_letters],
      ['restarts', c.restart || 'none (a failure ends the job)'], ['distributed', c.distributed ? 'yes' : 'no'],
      ['latency', c.latency_window ? 'measured over ' + c.latency_window + ' windows' : 'not measured'],
      ['latency target', c.latency_target]].forEach(function (r) {
      if (r[1] === undefined || r[1] === '' || r[1] === null) return;
      var tr = el('tr');
      tr.append(el('th', null, r[0]), el('td', { 'data-field': 'cfg-' + r[0].replace(/ /g, '-') }, String(r[1])));
      facts.append(tr);
    });
    parts.push(facts);

    var controls = !!snap.controls;
    if (controls) {
      var tok = el('div', { 'class': 'token' });
      var input = el('input', { type: 'password', 'class': 'token-input', placeholder: 'admin token (the first line of --admin-token-file)', autocomplete: 'off' });
      input.value = adminToken;
      input.addEventListener('input', function () { adminToken = input.value; });
      var sp = el('button', { type: 'button', 'class': 'ctl', 'data-ctl': 'savepoint' }, 'take a savepoint');
      sp.addEventListener('click', function () { control(v, 'POST', '/savepoint', {}); });
      tok.append(el('label', null, 'token '), input, sp);
      parts.push(tok);
    }
    var it = el('table', { 'class': 'inputs' });
    var hr = el('tr');
    ['operator', 'instances', 'input', controls ? 'change' : ''].forEach(function (h) { hr.append(el('th', null, h)); });
    it.append(hr);
    (c.inputs || []).forEach(function (inp) {
      var tr = el('tr', { 'data-input': inp.operator });
      tr.append(el('td', null, inp.operator + (inp.fused && inp.fused.length ? ' → ' + inp.fused.join(' → ') : '')),
        el('td', { 'class': 'num' }, '×' + inp.parallelism),
        el('td', { 'data-field': 'policy' }, inp.source ? 'source' + (inp.paused ? ' (paused)' : '') : inp.policy + ' · ' + fmtCount(inp.capacity)));
      var ctl = el('td', { 'class': 'ctl-cell' });
      if (controls && inp.source) {
        var verb = inp.paused ? 'resume' : 'pause';
        var b = el('button', { type: 'button', 'class': 'ctl', 'data-ctl': verb, 'data-op': inp.operator }, verb);
        b.addEventListener('click', function () { control(v, 'POST', '/sources/' + encodeURIComponent(inp.operator) + '/' + verb); });
        ctl.append(b);
      } else if (controls && inp.live) {
        var sel = el('select', { 'class': 'ctl-policy', 'data-op': inp.operator });
        POLICIES.forEach(function (p) { var o = el('option', { value: p }, p); if (p === inp.policy) o.selected = true; sel.append(o); });
        var cap = el('input', { type: 'number', min: '1', 'class': 'ctl-capacity', value: String(inp.capacity), title: 'capacity (records)' });
        var extra = el('input', { type: 'number', min: '0', 'class': 'ctl-extra', placeholder: 'N or rate', title: 'sample: keep one in N; throttle: records per second' });
        var apply = el('button', { type: 'button', 'class': 'ctl', 'data-ctl': 'set-input', 'data-op': inp.operator }, 'apply');
        apply.addEventListener('click', function () {
          var body = { policy: sel.value, capacity: Number(cap.value) };
          if (sel.value === 'sample') body.sample_every = Number(extra.value) || 2;
          if (sel.value === 'throttle') body.rate = Number(extra.value) || 1000;
          control(v, 'PUT', '/inputs/' + encodeURIComponent(inp.operator), body);
        });
        ctl.append(sel, cap, extra, apply);
      } else if (controls && inp.why) {
        ctl.append(el('span', { 'class': 'muted' }, inp.why));
      }
      tr.append(ctl);
      it.append(tr);
    });
    parts.push(it);
    if (controls) {
      v.ctlOut = v.ctlOut || el('div', { 'class': 'ctl-result', 'data-status': '' });
      parts.push(v.ctlOut);
    }
    var plan = el('pre', { 'class': 'plan' }, c.plan || '');
    parts.push(plan);
    v.cfgBody.replaceChildren.apply(v.cfgBody, parts);
  }

  // ---- the trace of a sampled record ----

  function newTracePanel(v) {
    var p = v.tracePanel;
    p.append(el('h3', null, 'follow a record'));
    var form = el('div', { 'class': 'trace-form' });
    var key = el('input', { type: 'text', 'class': 'trace-key', placeholder: 'record key (e.g. user-42)' });
    var byKey = el('button', { type: 'button', 'class': 'trace-find', 'data-by': 'key' }, 'find by key');
    var id = el('input', { type: 'text', 'class': 'trace-id', placeholder: 'trace id (32 hex digits)' });
    var byID = el('button', { type: 'button', 'class': 'trace-find', 'data-by': 'id' }, 'open trace');
    var clear = el('button', { type: 'button', 'class': 'trace-clear' }, 'clear');
    form.append(key, byKey, id, byID, clear);
    v.traceOut = el('div', { 'class': 'trace-out', 'data-state': 'none' });
    p.append(form, v.traceOut);
    byKey.addEventListener('click', function () { findTrace(v, 'key', key.value.trim()); });
    byID.addEventListener('click', function () { findTrace(v, 'id', id.value.trim()); });
    key.addEventListener('keydown', function (e) { if (e.key === 'Enter') findTrace(v, 'key', key.value.trim()); });
    id.addEventListener('keydown', function (e) { if (e.key === 'Enter') findTrace(v, 'id', id.value.trim()); });
    clear.addEventListener('click', function () { v.trace = null; drawTracePath(v, null); v.traceOut.replaceChildren(); v.traceOut.setAttribute('data-state', 'none'); });
  }

  function findTrace(v, by, value) {
    v.traceOut.setAttribute('data-state', 'loading');
    v.traceOut.replaceChildren(el('span', { 'class': 'muted' }, 'asking Jaeger…'));
    fetch('trace?job=' + encodeURIComponent(v.id) + '&' + by + '=' + encodeURIComponent(value), { credentials: 'omit' })
      .then(function (resp) { return resp.json().then(function (j) { return { status: resp.status, body: j }; }); })
      .then(function (r) {
        if (r.status !== 200 || !r.body.trace) {
          v.traceOut.setAttribute('data-state', 'error');
          v.traceOut.replaceChildren(el('div', { 'class': 'trace-error', 'data-status': String(r.status) }, r.body.error || ('status ' + r.status)));
          return;
        }
        v.trace = r.body.trace;
        drawTracePath(v, v.trace);
        drawWaterfall(v, v.trace, r.body.matches || []);
      })
      .catch(function (e) {
        v.traceOut.setAttribute('data-state', 'error');
        v.traceOut.replaceChildren(el('div', { 'class': 'trace-error' }, String(e)));
      });
  }

  // drawTracePath marks the operators of the trace's path on the graph,
  // numbered in order, and the edges between the tasks it crossed.
  function drawTracePath(v, t) {
    var svg = v.graph.querySelector('svg');
    if (!svg) return;
    svg.querySelectorAll('.trace-step').forEach(function (e) { e.remove(); });
    svg.querySelectorAll('.traced').forEach(function (e) { e.classList.remove('traced'); });
    if (!t) { svg.removeAttribute('data-trace'); return; }
    var taskOf = {};
    ((v.svgJob && v.svgJob.graph.tasks) || []).forEach(function (tk) { tk.operators.forEach(function (o) { taskOf[o] = tk.id; }); });
    var prevTask = null, step = 0;
    t.path.forEach(function (name) {
      var g = svg.querySelector('g.op[data-op="' + CSS.escape(name) + '"]');
      if (!g) return;
      step++;
      g.classList.add('traced');
      g.setAttribute('data-step', String(step));
      var badge = sv('g', { 'class': 'trace-step' });
      badge.append(sv('circle', { cx: -2, cy: 19, r: 8 }), sv('text', { x: -2, y: 23, 'text-anchor': 'middle' }, String(step)));
      g.append(badge);
      var task = taskOf[name];
      if (prevTask !== null && task !== prevTask) {
        svg.querySelectorAll('path.edge[data-from="' + prevTask + '"][data-to="' + task + '"]').forEach(function (e) { e.classList.add('traced'); });
      }
      prevTask = task;
    });
    svg.setAttribute('data-trace', t.id);
  }

  function drawWaterfall(v, t, matches) {
    var out = [];
    var head = el('div', { 'class': 'trace-head' });
    head.append(el('b', null, 'trace ' + t.id), document.createTextNode(' · ' + t.spans.length + ' spans · ' + fmtMS(t.duration_us / 1000) +
      ' · path ' + t.path.join(' → ') + (t.truncated ? ' · truncated' : '') + (matches.length > 1 ? ' · newest of ' + matches.length + ' matches' : '')));
    out.push(head);
    var wf = el('div', { 'class': 'waterfall', 'data-trace': t.id });
    var total = Math.max(t.duration_us, 1);
    t.spans.forEach(function (s) {
      var row = el('div', { 'class': 'wf-row', 'data-span': s.id, 'data-operator': s.operator });
      var label = el('div', { 'class': 'wf-label' }, s.operator + (s.name !== s.operator ? ' (' + s.name + ')' : ''));
      var lane = el('div', { 'class': 'wf-lane' });
      var bar = el('div', { 'class': 'wf-bar' });
      bar.style.left = (100 * s.start_us / total).toFixed(2) + '%';
      bar.style.width = Math.max(100 * s.duration_us / total, 0.4).toFixed(2) + '%';
      var attrs = s.attrs || {};
      bar.title = Object.keys(attrs).sort().map(function (k) { return k + ' = ' + attrs[k]; }).join('\n');
      lane.append(bar);
      (s.events || []).forEach(function (e) {
        var tick = el('div', { 'class': 'wf-event', title: e.name, 'data-event': e.name });
        tick.style.left = (100 * e.at_us / total).toFixed(2) + '%';
        lane.append(tick);
      });
      var d = el('div', { 'class': 'wf-dur num' }, fmtMS(s.duration_us / 1000));
      row.append(label, lane, d);
      wf.append(row);
    });
    out.push(wf);
    v.traceOut.setAttribute('data-state', 'shown');
    v.traceOut.replaceChildren.apply(v.traceOut, out);
  }

  function updateJob(v, job, snap) {
    // State, elapsed, checkpoints.
    setText(v.badge, job.state);
    v.badge.className = 'badge ' + job.state;
    v.badge.setAttribute('data-value', job.state);
    setText(v.elapsed, fmtMS(job.elapsed_ms));
    setText(v.err, job.error || '');
    var cp = job.checkpoints;
    setText(v.facts['restarts'], String(job.restarts)); setValue(v.facts['restarts'], job.restarts);
    setText(v.facts['cp-completed'], fmtCount(cp.completed)); setValue(v.facts['cp-completed'], cp.completed);
    setText(v.facts['cp-last'], cp.last_id ? '#' + cp.last_id : '–'); setValue(v.facts['cp-last'], cp.last_id);
    setText(v.facts['cp-duration'], cp.last_id ? fmtMS(cp.last_duration_ms) : '–');
    setText(v.facts['cp-age'], cp.age_ms >= 0 ? fmtMS(cp.age_ms) + ' ago' : '–');
    setText(v.facts['cp-failed'], fmtCount(cp.failed));
    setText(v.facts['cp-restored'], cp.restored_from ? '#' + cp.restored_from : '–');
    setText(v.facts['cp-progress'], cp.in_progress > 0
      ? '#' + cp.oldest_id + ' for ' + fmtMS(cp.oldest_since_ms) + ': ' + cp.oldest_acked + ' acked, ' + cp.oldest_pending + ' pending' +
        (cp.in_progress > 1 ? ' (+' + (cp.in_progress - 1) + ')' : '')
      : '–');
    setValue(v.facts['cp-progress'], cp.in_progress);
    if (cp.last_failure && v.facts['cp-failed']) { v.facts['cp-failed'].title = cp.last_failure; }

    updateCheckpoints(v, cp);
    updateExceptions(v, job.exceptions || {});
    addPoints(v, job);
    updateConfig(v, job, snap);

    // The graph, redrawn only when the plan changes.
    var gk = JSON.stringify(job.graph) + '|' + job.operators.map(function (o) { return o.traces_url || ''; }).join();
    if (gk !== v.graphKey) {
      drawGraph(v, job);
      v.graphKey = gk;
    }
    // The table rows, rebuilt only when the operators change.
    var rk = job.operators.map(function (o) { return o.name + '/' + o.task + '/' + (o.traces_url || ''); }).join('|');
    if (rk !== v.rowsKey) {
      v.tbody.replaceChildren();
      v.rows.clear();
      job.operators.forEach(function (op) {
        var r = newRow(v, op);
        v.rows.set(op.name, r);
        v.tbody.append(r.tr);
        updateInstances(v, r, op);
      });
      v.rowsKey = rk;
    }

    var byTask = new Map();
    job.operators.forEach(function (op) {
      if (op.head) byTask.set(op.task, op);
      var r = v.rows.get(op.name);
      if (!r) return;
      var c = r.cells;
      setText(c.in, fmtCount(op.in)); setValue(c.in, op.in);
      setText(c.inText, fmtRate(op.in_rate)); setValue(c.in_rate, op.in_rate);
      setText(c.out, fmtCount(op.out)); setValue(c.out, op.out);
      setText(c.out_rate, fmtRate(op.out_rate)); setValue(c.out_rate, op.out_rate);
      spark(v, op, c);
      if (c.bar) {
        var ratio = op.capacity > 0 ? Math.min(op.queued / op.capacity, 1) : 0;
        c.barFill.style.width = (100 * ratio).toFixed(1) + '%';
        c.bar.className = 'bar ' + fill(ratio);
        c.bar.setAttribute('data-value', String(op.queued));
        c.bar.setAttribute('data-capacity', String(op.capacity));
        setText(c.barText, fmtCount(op.queued) + ' / ' + fmtCount(op.capacity));
        setText(c.policy, op.policy + ' · high ' + fmtCount(op.queue_high_water));
        setValue(c.queue, op.queued);
      }
      var dropped = op.dropped ? fmtCount(op.dropped) + (op.drop_rate ? ' (' + fmtRate(op.drop_rate) + ')' : '') : '0';
      c.dropped.replaceChildren(document.createTextNode(dropped));
      if (op.dropped) c.dropped.append(el('span', { 'class': 'sub' }, byReason(op.dropped_by)));
      c.dropped.className = 'num' + (op.drop_rate > 0 ? ' bad' : '');
      setValue(c.dropped, op.dropped);
      setText(c.spilled, op.spilled ? fmtCount(op.spilled) + ' (' + fmtCount(op.spill_pending) + ' pending)' : '0');
      setValue(c.spilled, op.spilled);
      if (op.head) {
        setShares(c, op.busy, op.blocked, op.idle);
        c.shares.classList.toggle('bp-now', op.backpressured > 0);
        c.backpressure.title = op.backpressured + ' of ' + op.parallelism + ' instances without credit now; ' +
          fmtMS(op.blocked_ms) + ' without credit in total, summed over instances';
        setValue(c.backpressure, op.backpressured);
      }
      // The server marks the busiest instance of a skewed operator (SkewThreshold).
      var skewed = (op.instances || []).some(function (i) { return i.hot; });
      c.skew.hidden = !skewed;
      if (skewed) setText(c.skew, 'skew ×' + op.skew.toFixed(1));
      setValue(c.skew, op.skew || 0);
      updateInstances(v, r, op);
      setLatency(c.latency, op);
      setText(c.late, fmtCount(op.late)); setValue(c.late, op.late);
      // The time of day; the date is in the tooltip.
      setText(c.watermark, op.watermark ? fmtTime(op.watermark).slice(11) : '–');
      if (op.watermark) c.watermark.title = fmtTime(op.watermark) + ' UTC';
      setText(c.dead_lettered, fmtCount(op.dead_lettered)); setValue(c.dead_lettered, op.dead_lettered);
      c.dead_lettered.className = 'num' + (op.dead_lettered > 0 ? ' bad' : '');

      var s = v.svgOps.get(op.name);
      if (s) {
        var rates = 'in ' + fmtRate(op.in_rate) + '  out ' + fmtRate(op.out_rate);
        setText(s.rates, rates);
        var alerts = [];
        if (op.drop_rate > 0) alerts.push('drop ' + fmtRate(op.drop_rate));
        else if (op.dropped > 0) alerts.push('dropped ' + fmtCount(op.dropped));
        if (op.spill_pending > 0) alerts.push('spill ' + fmtCount(op.spill_pending));
        if (op.late > 0) alerts.push('late ' + fmtCount(op.late));
        if (op.dead_lettered > 0) alerts.push('dead ' + fmtCount(op.dead_lettered));
        setText(s.alert, alerts.join(' '));
      }
    });
    drawCharts(v, job);
    v.svgTasks.forEach(function (t, id) {
      var head = byTask.get(id);
      if (!head) return;
      t.g.classList.toggle('bp', head.backpressured > 0);
      t.g.classList.toggle('drops', head.drop_rate > 0);
      if (t.qFill) {
        var ratio = head.capacity > 0 ? Math.min(head.queued / head.capacity, 1) : 0;
        t.qFill.setAttribute('width', (t.qWidth * ratio).toFixed(1));
        t.qFill.setAttribute('class', 'q-fill ' + fill(ratio));
        setText(t.qText, 'queue ' + fmtCount(head.queued) + ' / ' + fmtCount(head.capacity) + '  ' + head.policy);
        t.g.setAttribute('data-queued', String(head.queued));
      }
    });
  }

  function apply(snap) {
    if (snap.title) {
      setText(titleEl, snap.title);
      if (document.title !== snap.title) document.title = snap.title;
    }
    setText(updatedEl, 'updated ' + fmtTime(snap.time) + ' UTC · every ' + snap.interval_ms + ' ms');
    updatedEl.setAttribute('data-seq', String(snap.seq));
    lastSnap = snap;
    updateProcess(snap);
    var seen = new Set();
    (snap.jobs || []).forEach(function (job) {
      seen.add(job.id);
      var v = views.get(job.id);
      if (!v) {
        v = newView(job);
        views.set(job.id, v);
        jobsEl.append(v.sec);
      }
      v.tracePanel.hidden = !snap.traces;
      updateJob(v, job, snap);
    });
    views.forEach(function (v, id) {
      if (!seen.has(id)) { v.sec.remove(); views.delete(id); }
    });
    emptyEl.hidden = views.size > 0;
  }

  function status(state) {
    statusEl.className = 'status ' + state;
    statusEl.setAttribute('data-state', state);
    setText(statusEl, state);
  }

  // The first frame: the snapshot the server put into the page, drawn
  // before the stream's first event arrives.
  var first = document.getElementById('first-frame');
  if (first && first.textContent) {
    try { apply(JSON.parse(first.textContent)); } catch (e) { /* the stream brings the next */ }
  }

  // The browser reconnects by itself (the stream asks for a one-second
  // retry); the page keeps the last snapshot meanwhile.
  var es = new EventSource('events');
  es.addEventListener('snapshot', function (e) {
    status('live');
    apply(JSON.parse(e.data));
  });
  es.onopen = function () { status('live'); };
  es.onerror = function () { status(es.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting'); };
})();
