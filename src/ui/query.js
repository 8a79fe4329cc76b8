// Sluice's query page: Prometheus 3's link format (g0.expr, g0.tab, ...),
// an editor with completion and live parse errors, a table and a graph.
// No framework, no network beyond this server.
'use strict';

(function () {
  const AGGREGATIONS = ['sum', 'avg', 'min', 'max', 'count', 'group', 'stddev', 'stdvar', 'topk',
    'bottomk', 'quantile', 'count_values', 'limitk', 'limit_ratio'];
  const KEYWORDS = ['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool',
    'and', 'or', 'unless', 'atan2'];
  const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
    '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#ad494a', '#637939', '#8c6d31', '#843c39',
    '#5254a3', '#6b6ecf', '#9c9ede', '#e7969c', '#7b4173'];
  const TYPE_NAMES = { vector: 'instant vector', matrix: 'range vector', scalar: 'scalar', string: 'string' };

  const { settings, api, apiGet, parseDuration, formatDuration, formatTime, parseTime, el, labelText, labelNode, formatNumber } = window.Sluice;
  const RANGE_STEPS = ['1s', '10s', '1m', '5m', '15m', '30m', '1h', '2h', '6h', '12h', '1d', '2d', '1w', '2w', '4w', '8w', '16w', '26w', '1y', '2y'].map(parseDuration);
  const DENSITY = { low: 100, medium: 250, high: 750 };

  // ---- the panels' state in the URL (Prometheus 3's link format) ----
  function defaultPanel() {
    return { expr: '', tab: 'table', range: 3600000, end: null, step: null, resType: 'auto', density: 'medium', displayMode: 'lines', showExemplars: false, showTree: false };
  }
  function decodePanels(search) {
    const q = new URLSearchParams(search);
    const out = [];
    for (let i = 0; ; i++) {
      const g = 'g' + i + '.';
      const expr = q.get(g + 'expr');
      if (expr === null) break;
      const p = defaultPanel();
      p.expr = expr;
      const tab = q.get(g + 'tab');
      if (tab === 'graph' || tab === '0') p.tab = 'graph';
      else if (tab === 'table' || tab === '1' || tab === 'explain') p.tab = 'table';
      p.showTree = q.get(g + 'show_tree') === '1';
      const mode = q.get(g + 'display_mode');
      if (mode === 'lines' || mode === 'stacked' || mode === 'heatmap') p.displayMode = mode;
      if (q.has(g + 'stacked')) p.displayMode = q.get(g + 'stacked') === '1' ? 'stacked' : 'lines';
      p.showExemplars = q.get(g + 'show_exemplars') === '1';
      const range = parseDuration(q.get(g + 'range_input'));
      if (range) p.range = range;
      for (const k of ['end_input', 'moment_input']) {
        const t = parseTime(q.get(g + k));
        if (t !== null) p.end = t;
      }
      const stepInput = parseInt(q.get(g + 'step_input'), 10);
      if (stepInput > 0) p.step = stepInput * 1000;
      // As Prometheus 3 reads it: a resolution type overrides step_input
      // only with a valid density or step.
      const resType = q.get(g + 'res_type');
      if (resType === 'auto') {
        const d = q.get(g + 'res_density');
        if (DENSITY[d]) { p.step = null; p.density = d; p.resType = 'auto'; }
      } else if (resType === 'fixed' || resType === 'custom') {
        const s = parseFloat(q.get(g + 'res_step'));
        if (s > 0) { p.step = Math.round(s * 1000); p.resType = resType; }
      }
      out.push(p);
    }
    return out;
  }
  function encodePanels() {
    const q = new URLSearchParams();
    panels.forEach((panel, i) => {
      const p = panel.state;
      const g = 'g' + i + '.';
      q.set(g + 'expr', p.expr);
      q.set(g + 'show_tree', p.showTree ? '1' : '0');
      q.set(g + 'tab', p.tab);
      if (p.end !== null) {
        q.set(g + 'end_input', formatTime(p.end));
        q.set(g + 'moment_input', formatTime(p.end));
      }
      q.set(g + 'range_input', formatDuration(p.range));
      if (p.step === null) {
        q.set(g + 'res_type', 'auto');
        q.set(g + 'res_density', p.density);
      } else {
        q.set(g + 'res_type', p.resType === 'fixed' ? 'fixed' : 'custom');
        q.set(g + 'res_step', String(p.step / 1000));
      }
      q.set(g + 'display_mode', p.displayMode);
      q.set(g + 'show_exemplars', p.showExemplars ? '1' : '0');
    });
    const url = '/query?' + q.toString();
    if (url !== location.pathname + location.search) history.replaceState(null, '', url);
  }

  // ---- completion sources ----
  let metricNames = null;
  async function metrics() {
    if (metricNames === null) {
      metricNames = apiGet('label/__name__/values').then((r) => r.data || []).catch(() => []);
    }
    return metricNames;
  }
  const labelCache = new Map();
  function cached(key, load) {
    if (!labelCache.has(key)) labelCache.set(key, load().catch(() => []));
    return labelCache.get(key);
  }
  const labelNames = (metric) => cached('n:' + metric, () => api('labels', metric ? { 'match[]': metric } : {}).then((r) => r.data || []));
  const labelValues = (metric, name) => cached('v:' + metric + ':' + name,
    () => apiGet('label/' + encodeURIComponent(name) + '/values', metric ? { 'match[]': metric } : {}).then((r) => r.data || []));
  const signature = (f) => {
    const args = f.argTypes.map((t) => TYPE_NAMES[t] || t);
    if (f.variadic > 0 && args.length) args[args.length - 1] = '[' + args[args.length - 1] + ']';
    if (f.variadic < 0 && args.length) args[args.length - 1] += '...';
    return '(' + args.join(', ') + ') → ' + (TYPE_NAMES[f.returnType] || f.returnType);
  };

  // What is being typed at `pos`: a metric or function name, a label name
  // inside braces or a grouping, or a label value inside quotes.
  function completionContext(text, pos) {
    const before = text.slice(0, pos);
    let brace = -1;
    let quote = null;
    let quoteStart = -1;
    for (let i = 0; i < before.length; i++) {
      const c = before[i];
      if (quote) {
        if (c === '\\') i++;
        else if (c === quote) quote = null;
        continue;
      }
      if (c === '"' || c === "'" || c === '`') { quote = c; quoteStart = i; } else if (c === '{') brace = i;
      else if (c === '}') brace = -1;
    }
    const metricBefore = (at) => {
      const m = /([a-zA-Z_:][a-zA-Z0-9_:]*)\s*$/.exec(before.slice(0, at));
      return m ? m[1] : '';
    };
    if (quote && brace >= 0 && quoteStart > brace) {
      const m = /([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*$/.exec(before.slice(brace + 1, quoteStart));
      if (!m) return null;
      return { kind: 'value', label: m[1], metric: metricBefore(brace), prefix: before.slice(quoteStart + 1), from: quoteStart + 1, quote };
    }
    if (quote) return null;
    const word = /[a-zA-Z_:][a-zA-Z0-9_:]*$/.exec(before);
    const prefix = word ? word[0] : '';
    const from = pos - prefix.length;
    if (brace >= 0) {
      const inside = before.slice(brace + 1, from);
      if (/(^|,)\s*$/.test(inside)) return { kind: 'label', metric: metricBefore(brace), prefix, from };
      return null;
    }
    if (/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*,)?\s*$/.test(before.slice(0, from))) {
      return { kind: 'label', metric: '', prefix, from };
    }
    if (prefix === '') return null;
    if (/[0-9]$/.test(before.slice(0, from))) return null;
    return { kind: 'name', prefix, from };
  }

  async function suggestions(ctx) {
    const p = ctx.prefix;
    const rank = (items) => {
      const starts = items.filter((it) => it.label.startsWith(p));
      const contains = p ? items.filter((it) => !it.label.startsWith(p) && it.label.includes(p)) : [];
      return starts.concat(contains).slice(0, 100);
    };
    if (ctx.kind === 'value') {
      const values = await labelValues(ctx.metric, ctx.label);
      return rank(values.map((v) => ({ label: v, kind: 'value', insert: v.replace(/\\/g, '\\\\').replace(new RegExp(ctx.quote, 'g'), '\\' + ctx.quote) })));
    }
    if (ctx.kind === 'label') {
      const names = await labelNames(ctx.metric);
      return rank(names.filter((n) => n !== '__name__').map((n) => ({ label: n, kind: 'label', insert: n })));
    }
    const items = [];
    for (const f of settings.functions) items.push({ label: f.name, kind: 'function ' + signature(f), insert: f.name + '(' });
    for (const a of AGGREGATIONS) items.push({ label: a, kind: 'aggregation', insert: a });
    for (const k of KEYWORDS) items.push({ label: k, kind: 'keyword', insert: k });
    for (const m of await metrics()) items.push({ label: m, kind: 'metric', insert: m });
    items.sort((a, b) => (a.label < b.label ? -1 : a.label > b.label ? 1 : 0));
    return rank(items).filter((it) => it.label !== p);
  }

  const svg = (tag, attrs) => {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  };
  function histogramText(h) {
    return 'count ' + h.count + ', sum ' + h.sum;
  }

  // ---- the chart: lines or stacked areas over a time axis, SVG ----
  function niceStep(span, ticks) {
    const raw = span / Math.max(ticks, 1);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800, 2592000].map((s) => s * 1000);

  class Chart {
    constructor(panel, result, start, end, step, exemplars) {
      this.panel = panel;
      this.start = start;
      this.end = end;
      this.step = step;
      this.hidden = new Set();
      this.series = result.map((s, i) => {
        const points = (s.values || []).map(([t, v]) => [t * 1000, parseFloat(v)]);
        const hist = (s.histograms || []).map(([t, h]) => [t * 1000, parseFloat(h.count)]);
        const raw = (s.histograms || []).map(([t, h]) => [t * 1000, h]);
        return { metric: s.metric, points: points.concat(hist).sort((a, b) => a[0] - b[0]), histogram: hist.length > 0, raw, color: COLORS[i % COLORS.length] };
      });
      this.exemplars = exemplars || [];
      this.root = el('div', { class: 'chart' });
      this.tooltip = el('div', { class: 'tooltip', hidden: true });
      this.legend = el('ul', { class: 'legend' });
      this.exemplarBox = el('div', { class: 'exemplar-box', hidden: true });
      this.root.append(this.tooltip);
      this.series.forEach((s, i) => {
        const li = el('li', { class: 'legend-item', onclick: () => { this.toggle(i); li.classList.toggle('off', this.hidden.has(i)); } },
          el('span', { class: 'swatch', style: 'background:' + s.color }), labelNode(s.metric), s.histogram ? el('span', { class: 'buckets' }, '(histogram count)') : null);
        this.legend.append(li);
      });
    }
    toggle(i) {
      if (this.hidden.has(i)) this.hidden.delete(i); else this.hidden.add(i);
      this.draw();
    }
    mount(container) {
      container.replaceChildren(this.root, this.legend, this.exemplarBox);
      this.draw();
    }
    visible() { return this.series.map((s, i) => [s, i]).filter(([, i]) => !this.hidden.has(i)); }
    // The stacked sums, per grid time, in series order.
    stacked() {
      const sums = new Map();
      const out = [];
      for (const [s, i] of this.visible()) {
        const pts = s.points.filter(([, v]) => isFinite(v)).map(([t, v]) => {
          const base = sums.get(t) || 0;
          sums.set(t, base + v);
          return [t, base + v, base];
        });
        out.push([s, i, pts]);
      }
      return out;
    }
    // Native histograms as heatmaps, one band per series: a column per
    // step, a row per bucket (lowest at the bottom), darker for more.
    drawHeatmap(w) {
      const shown = this.visible().filter(([s]) => s.raw.length).slice(0, 6);
      const band = 200;
      const m = { l: 90, r: 16, t: 10, b: 26 };
      const h = m.t + shown.length * (band + 24) + m.b;
      const root = svg('svg', { width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, class: 'graph heatmap' });
      const x = (t) => m.l + (t - this.start) / (this.end - this.start) * (w - m.l - m.r);
      const cell = Math.max(x(this.start + this.step) - x(this.start), 1);
      shown.forEach(([s], k) => {
        const top = m.t + k * (band + 24);
        const bounds = new Map();
        let most = 0;
        for (const [, hist] of s.raw) {
          for (const b of hist.buckets || []) {
            bounds.set(b[1] + ',' + b[2], [parseFloat(b[1]), parseFloat(b[2]), b[1], b[2]]);
            most = Math.max(most, parseFloat(b[3]));
          }
        }
        const rows = [...bounds.entries()].sort((a, b) => a[1][1] - b[1][1] || a[1][0] - b[1][0]);
        const rowOf = new Map(rows.map(([key], j) => [key, j]));
        const rh = band / Math.max(rows.length, 1);
        const title = svg('text', { x: m.l, y: top + 12, class: 'band-title' });
        title.textContent = labelText(s.metric);
        root.append(title);
        const axis = svg('g', { class: 'axis' });
        const every = Math.max(1, Math.ceil(rows.length / 8));
        rows.forEach(([, b], j) => {
          if (j % every) return;
          const label = svg('text', { x: m.l - 6, y: top + 16 + band - j * rh - rh / 2 + 4, 'text-anchor': 'end' });
          label.textContent = '≤ ' + formatNumber(b[1]);
          axis.append(label);
        });
        root.append(axis);
        for (const [t, hist] of s.raw) {
          for (const b of hist.buckets || []) {
            const j = rowOf.get(b[1] + ',' + b[2]);
            const c = parseFloat(b[3]);
            if (!(c > 0) || j === undefined) continue;
            const r = svg('rect', {
              class: 'heat-cell', x: x(t) - cell / 2, y: top + 16 + band - (j + 1) * rh, width: cell, height: rh,
              fill: s.color, 'fill-opacity': (0.15 + 0.85 * c / most).toFixed(3),
            });
            const tip = svg('title');
            tip.textContent = bucketText(b) + ' at ' + formatTime(t) + ' UTC';
            r.append(tip);
            root.append(r);
          }
        }
      });
      const old = this.root.querySelector('svg');
      if (old) old.replaceWith(root); else this.root.prepend(root);
    }
    draw() {
      const w = Math.max(this.root.clientWidth || this.panel.result.clientWidth || 800, 320);
      if (this.panel.state.displayMode === 'heatmap' && this.series.some((s) => s.raw.length)) {
        this.drawHeatmap(w);
        return;
      }
      const h = 320;
      const m = { l: 60, r: 16, t: 10, b: 26 };
      const stacked = this.panel.state.displayMode === 'stacked';
      const layers = stacked ? this.stacked() : this.visible().map(([s, i]) => [s, i, s.points.filter(([, v]) => isFinite(v)).map(([t, v]) => [t, v, 0])]);
      let lo = Infinity;
      let hi = -Infinity;
      for (const [, , pts] of layers) for (const [, v, b] of pts) { lo = Math.min(lo, v, stacked ? b : v); hi = Math.max(hi, v); }
      if (!isFinite(lo)) { lo = 0; hi = 1; }
      if (stacked) lo = Math.min(lo, 0);
      if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
      const ystep = niceStep(hi - lo, 5);
      lo = Math.floor(lo / ystep) * ystep;
      hi = Math.ceil(hi / ystep) * ystep;
      const x = (t) => m.l + (t - this.start) / (this.end - this.start) * (w - m.l - m.r);
      const y = (v) => m.t + (hi - v) / (hi - lo) * (h - m.t - m.b);
      this.x = x;
      this.tOf = (px) => this.start + (px - m.l) / (w - m.l - m.r) * (this.end - this.start);
      this.y = y;
      const root = svg('svg', { width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, class: 'graph' });
      const grid = svg('g', { class: 'grid' });
      const axis = svg('g', { class: 'axis' });
      for (let v = lo; v <= hi + ystep / 2; v += ystep) {
        grid.append(svg('line', { x1: m.l, x2: w - m.r, y1: y(v), y2: y(v) }));
        const t = svg('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' });
        t.textContent = formatNumber(+v.toPrecision(12));
        axis.append(t);
      }
      const span = this.end - this.start;
      const tstep = TIME_STEPS.find((s) => span / s <= Math.max(2, Math.floor((w - m.l - m.r) / 110))) || TIME_STEPS[TIME_STEPS.length - 1];
      for (let t = Math.ceil(this.start / tstep) * tstep; t <= this.end; t += tstep) {
        grid.append(svg('line', { x1: x(t), x2: x(t), y1: m.t, y2: h - m.b }));
        const label = svg('text', { x: x(t), y: h - 8, 'text-anchor': 'middle' });
        const s = formatTime(t);
        label.textContent = span > 86400000 ? s.slice(5, 16) : tstep < 60000 ? s.slice(11, 19) : s.slice(11, 16);
        axis.append(label);
      }
      root.append(grid, axis);
      const gap = Math.max(this.step * 1.5, 1);
      for (const [s, i, pts] of layers) {
        let d = '';
        let area = '';
        let runStart = 0;
        const close = (j) => {
          if (!stacked || j <= runStart) return;
          const run = pts.slice(runStart, j);
          area += 'M' + run.map(([t, v]) => x(t).toFixed(1) + ',' + y(v).toFixed(1)).join('L') +
            'L' + run.slice().reverse().map(([t, , b]) => x(t).toFixed(1) + ',' + y(b).toFixed(1)).join('L') + 'Z';
        };
        pts.forEach(([t, v], j) => {
          const jump = j === 0 || t - pts[j - 1][0] > gap;
          if (jump) { close(j); runStart = j; }
          d += (jump ? 'M' : 'L') + x(t).toFixed(1) + ',' + y(v).toFixed(1);
        });
        close(pts.length);
        if (stacked && area) root.append(svg('path', { d: area, class: 'series-area', fill: s.color, 'fill-opacity': '0.3', stroke: 'none', 'data-series': i }));
        if (pts.length === 1 || pts.every((p, j) => j === 0 || p[0] - pts[j - 1][0] > gap)) {
          for (const [t, v] of pts) root.append(svg('circle', { cx: x(t), cy: y(v), r: 2, fill: s.color, class: 'series-point' }));
        }
        root.append(svg('path', { d, class: 'series-line', stroke: s.color, 'data-series': i }));
      }
      for (const ex of this.exemplars) {
        const c = svg('circle', { cx: x(ex.t), cy: y(ex.v), r: 4, fill: ex.color, class: 'exemplar' });
        c.addEventListener('click', (e) => { e.stopPropagation(); this.showExemplar(ex); });
        root.append(c);
      }
      const cursor = svg('line', { class: 'cursor', y1: m.t, y2: h - m.b, visibility: 'hidden' });
      const zoom = svg('rect', { class: 'zoom', y: m.t, height: h - m.t - m.b, visibility: 'hidden' });
      root.append(cursor, zoom);
      let drag = null;
      // Positions from the SVG's box: a child's own offset would differ.
      const at = (e) => {
        const r = root.getBoundingClientRect();
        return [e.clientX - r.left, e.clientY - r.top];
      };
      root.addEventListener('mousedown', (e) => { drag = at(e)[0]; });
      root.addEventListener('mousemove', (e) => {
        const [px, py] = at(e);
        cursor.setAttribute('x1', px);
        cursor.setAttribute('x2', px);
        cursor.setAttribute('visibility', px >= m.l && px <= w - m.r ? 'visible' : 'hidden');
        if (drag !== null) {
          zoom.setAttribute('x', Math.min(drag, px));
          zoom.setAttribute('width', Math.abs(px - drag));
          zoom.setAttribute('visibility', 'visible');
        }
        this.showTooltip(px, py, w);
      });
      root.addEventListener('mouseleave', () => { cursor.setAttribute('visibility', 'hidden'); this.tooltip.hidden = true; });
      root.addEventListener('mouseup', (e) => {
        const from = drag;
        const px = at(e)[0];
        drag = null;
        zoom.setAttribute('visibility', 'hidden');
        if (from !== null && Math.abs(px - from) > 5) {
          const a = this.tOf(Math.min(from, px));
          const b = this.tOf(Math.max(from, px));
          this.panel.zoomTo(Math.round(a / 1000) * 1000, Math.round(b / 1000) * 1000);
        }
      });
      const old = this.root.querySelector('svg');
      if (old) old.replaceWith(root); else this.root.prepend(root);
    }
    showTooltip(px, py, w) {
      const t = this.tOf(px);
      const rows = [];
      let at = null;
      for (const [s] of this.visible()) {
        let best = null;
        for (const p of s.points) if (best === null || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
        if (best && Math.abs(best[0] - t) <= Math.max(this.step, 1)) {
          rows.push([s, best[1]]);
          at = best[0];
        }
      }
      if (!rows.length) { this.tooltip.hidden = true; return; }
      rows.sort((a, b) => b[1] - a[1]);
      const more = rows.length > 20 ? [el('div', {}, '… ' + (rows.length - 20) + ' more')] : [];
      this.tooltip.replaceChildren(el('div', { class: 't' }, formatTime(at) + ' UTC'),
        ...rows.slice(0, 20).map(([s, v]) => el('div', { class: 'row' }, el('span', { class: 'swatch', style: 'background:' + s.color }), String(v), ' ', labelText(s.metric))),
        ...more);
      this.tooltip.hidden = false;
      this.tooltip.style.left = Math.min(px + 14, Math.max(w - 360, 0)) + 'px';
      this.tooltip.style.top = (py + 14) + 'px';
    }
    showExemplar(ex) {
      const labels = Object.entries(ex.labels).map(([k, v]) => el('div', {}, k + '=' + JSON.stringify(v)));
      const trace = ex.labels.trace_id || ex.labels.traceID || ex.labels.traceId;
      const copy = trace ? [el('button', { type: 'button', class: 'copy-trace', onclick: () => copyText(trace) }, 'Copy trace ID')] : [];
      this.exemplarBox.replaceChildren(el('div', {}, 'Exemplar of ', labelNode(ex.series), ' at ', formatTime(ex.t), ' UTC: ', String(ex.v)), ...labels, ...copy);
      this.exemplarBox.hidden = false;
    }
  }
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).catch(() => prompt('Copy:', text));
    } else {
      prompt('Copy:', text);
    }
  }

  // ---- a panel: editor, controls, messages, result ----
  const panels = [];
  class Panel {
    constructor(state) {
      this.state = state;
      this.seq = 0;
      this.completeSeq = 0;
      this.textarea = el('textarea', { rows: 1, spellcheck: 'false', placeholder: 'Expression (press Shift+Enter for newlines)', 'aria-label': 'expression' });
      this.textarea.value = state.expr;
      this.list = el('ul', { class: 'complete', hidden: true, role: 'listbox' });
      this.messages = el('div', { class: 'messages' });
      this.result = el('div', { class: 'result' });
      this.stats = el('span', { class: 'stats' });
      this.tabTable = el('button', { type: 'button', onclick: () => this.setTab('table') }, 'Table');
      this.tabGraph = el('button', { type: 'button', onclick: () => this.setTab('graph') }, 'Graph');
      this.controls = el('div', { class: 'controls' });
      this.root = el('section', { class: 'panel' },
        el('div', { class: 'editor-row' },
          el('div', { class: 'editor' }, this.textarea, this.list),
          el('button', { type: 'button', class: 'primary execute', onclick: () => this.execute() }, 'Execute'),
          el('button', { type: 'button', class: 'format', title: 'Format the expression (format_query)', onclick: () => this.format() }, 'Format'),
          el('button', { type: 'button', class: 'remove', title: 'Remove this query', onclick: () => this.remove() }, '✕')),
        el('div', { class: 'tabs' }, this.tabTable, this.tabGraph, this.stats),
        this.controls, this.messages, this.result);
      this.items = [];
      this.active = 0;
      this.textarea.addEventListener('input', () => {
        this.state.expr = this.textarea.value;
        // An error about what was there before is no longer news.
        this.showParse(null);
        this.autosize();
        this.checkSoon();
        this.complete();
        encodePanels();
      });
      this.textarea.addEventListener('keydown', (e) => this.keydown(e));
      this.textarea.addEventListener('blur', () => setTimeout(() => { this.list.hidden = true; }, 150));
      this.textarea.addEventListener('click', () => { this.list.hidden = true; });
      this.autosize();
      this.renderControls();
      this.markTab();
    }
    autosize() {
      this.textarea.style.height = 'auto';
      this.textarea.style.height = Math.max(this.textarea.scrollHeight + 2, 36) + 'px';
    }
    keydown(e) {
      const open = !this.list.hidden && this.items.length > 0;
      if (open && (e.key === 'ArrowDown' || e.key === 'ArrowUp')) {
        e.preventDefault();
        this.active = (this.active + (e.key === 'ArrowDown' ? 1 : this.items.length - 1)) % this.items.length;
        this.drawList();
      } else if (open && (e.key === 'Enter' || e.key === 'Tab')) {
        e.preventDefault();
        this.accept(this.active);
      } else if (e.key === 'Escape') {
        this.list.hidden = true;
      } else if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault();
        this.list.hidden = true;
        this.execute();
      }
    }
    async complete() {
      const pos = this.textarea.selectionStart;
      const ctx = completionContext(this.textarea.value, pos);
      const seq = ++this.completeSeq;
      if (!ctx) { this.list.hidden = true; return; }
      const items = await suggestions(ctx);
      if (seq !== this.completeSeq) return;
      this.ctx = ctx;
      this.items = items;
      this.active = 0;
      this.drawList();
    }
    drawList() {
      this.list.replaceChildren(...this.items.map((it, i) => el('li', {
        class: i === this.active ? 'on' : '', role: 'option', 'data-kind': it.kind.split(' ')[0],
        onmousedown: (e) => { e.preventDefault(); this.accept(i); },
      }, el('span', {}, it.label), el('span', { class: 'kind' }, it.kind))));
      this.list.hidden = this.items.length === 0;
      const on = this.list.children[this.active];
      if (on && on.scrollIntoView) on.scrollIntoView({ block: 'nearest' });
    }
    accept(i) {
      const it = this.items[i];
      if (!it) return;
      const v = this.textarea.value;
      const pos = this.textarea.selectionStart;
      const next = v.slice(0, this.ctx.from) + it.insert + v.slice(pos);
      this.textarea.value = next;
      const at = this.ctx.from + it.insert.length;
      this.textarea.setSelectionRange(at, at);
      this.state.expr = next;
      this.list.hidden = true;
      this.items = [];
      this.autosize();
      this.checkSoon();
      encodePanels();
      this.textarea.focus();
    }
    checkSoon() {
      clearTimeout(this.checkTimer);
      this.checkTimer = setTimeout(() => this.check(), 250);
    }
    // The parse error at its position, before the query runs.
    async check() {
      const expr = this.textarea.value;
      if (!expr.trim()) { this.showParse(null); return true; }
      try {
        await api('parse_query', { query: expr });
        if (expr === this.textarea.value) this.showParse(null);
        return true;
      } catch (e) {
        if (expr === this.textarea.value) this.showParse(e.message);
        return false;
      }
    }
    showParse(message) {
      this.textarea.classList.toggle('bad', !!message);
      const old = this.messages.querySelector('.parse-error');
      if (old) old.remove();
      if (!message) return;
      const text = message.replace(/^invalid parameter "query": /, '');
      const box = el('div', { class: 'error parse-error' }, text);
      const m = /^(\d+):(\d+):/.exec(text);
      if (m) {
        const line = this.textarea.value.split('\n')[+m[1] - 1];
        if (line !== undefined) box.append('\n\n' + line + '\n' + ' '.repeat(Math.max(+m[2] - 1, 0)) + '^');
      }
      this.messages.prepend(box);
    }
    async format() {
      try {
        const r = await api('format_query', { query: this.textarea.value });
        this.textarea.value = r.data;
        this.state.expr = r.data;
        this.autosize();
        encodePanels();
      } catch (e) {
        this.showParse(e.message);
      }
    }
    remove() {
      const i = panels.indexOf(this);
      if (i >= 0) panels.splice(i, 1);
      this.root.remove();
      if (!panels.length) addPanel(defaultPanel());
      encodePanels();
    }
    setTab(tab) {
      this.state.tab = tab;
      this.markTab();
      this.renderControls();
      encodePanels();
      this.execute();
    }
    markTab() {
      this.tabTable.classList.toggle('on', this.state.tab === 'table');
      this.tabGraph.classList.toggle('on', this.state.tab === 'graph');
      this.root.dataset.tab = this.state.tab;
    }
    effectiveStep() {
      if (this.state.step !== null) return this.state.step;
      return Math.max(Math.floor(this.state.range / DENSITY[this.state.density] / 1000) * 1000, 1000);
    }
    renderControls() {
      const s = this.state;
      const endInput = el('input', { class: 'end-input', placeholder: 'now', value: s.end === null ? '' : formatTime(s.end), title: 'End time, UTC (YYYY-MM-DD HH:mm:ss); empty: now' });
      endInput.addEventListener('change', () => {
        const t = parseTime(endInput.value);
        s.end = t;
        if (t === null) endInput.value = '';
        encodePanels();
        this.execute();
      });
      const parts = [];
      if (s.tab === 'graph') {
        const rangeInput = el('input', { class: 'range-input', value: formatDuration(s.range), title: 'Range, e.g. 1h, 30m, 1d2h' });
        const setRange = (ms) => { s.range = ms; rangeInput.value = formatDuration(ms); encodePanels(); this.execute(); };
        rangeInput.addEventListener('change', () => {
          const ms = parseDuration(rangeInput.value);
          if (ms) setRange(ms); else rangeInput.value = formatDuration(s.range);
        });
        const shorter = () => setRange([...RANGE_STEPS].reverse().find((r) => r < s.range) || s.range);
        const longer = () => setRange(RANGE_STEPS.find((r) => r > s.range) || s.range);
        const stepInput = el('input', { class: 'step-input', placeholder: formatDuration(this.effectiveStep()) + ' (auto)', value: s.step === null ? '' : formatDuration(s.step), title: 'Resolution (step); empty: range / 250' });
        stepInput.addEventListener('change', () => {
          const ms = parseDuration(stepInput.value);
          s.step = ms || null;
          s.resType = ms ? 'custom' : 'auto';
          if (!ms) stepInput.value = '';
          encodePanels();
          this.execute();
        });
        const mode = el('select', { class: 'display-mode', title: 'Heatmap: native histograms, a row per bucket' },
          el('option', { value: 'lines' }, 'Lines'), el('option', { value: 'stacked' }, 'Stacked'), el('option', { value: 'heatmap' }, 'Heatmap'));
        mode.value = s.displayMode;
        mode.addEventListener('change', () => { s.displayMode = mode.value; encodePanels(); if (this.chart) this.chart.draw(); });
        const ex = el('input', { type: 'checkbox', class: 'show-exemplars', checked: s.showExemplars });
        ex.addEventListener('change', () => { s.showExemplars = ex.checked; encodePanels(); this.execute(); });
        parts.push(el('span', { class: 'range' }, el('button', { type: 'button', title: 'Shorter range', onclick: shorter }, '−'), rangeInput, el('button', { type: 'button', title: 'Longer range', onclick: longer }, '+')),
          el('span', { class: 'end' }, 'End ', endInput),
          el('span', { class: 'step' }, 'Step ', stepInput), mode,
          el('label', {}, ex, ' Exemplars'));
      } else {
        parts.push(el('span', { class: 'end' }, 'Evaluation time ', endInput));
      }
      this.controls.replaceChildren(...parts);
    }
    zoomTo(from, to) {
      this.state.end = to;
      this.state.range = Math.max(to - from, 1000);
      this.renderControls();
      encodePanels();
      this.execute();
    }
    showNotes(warnings, infos) {
      for (const n of this.messages.querySelectorAll('.warning, .info, .error:not(.parse-error)')) n.remove();
      for (const w of warnings || []) this.messages.append(el('div', { class: 'warning' }, w));
      for (const i of infos || []) this.messages.append(el('div', { class: 'info' }, i));
    }
    async execute() {
      const expr = this.textarea.value.trim();
      const seq = ++this.seq;
      this.root.dataset.state = 'running';
      this.showNotes();
      if (!expr) { this.result.replaceChildren(); this.stats.textContent = ''; this.root.dataset.state = 'idle'; return; }
      const started = performance.now();
      try {
        let n = 0;
        if (this.state.tab === 'graph') n = await this.runGraph(expr, seq);
        else n = await this.runTable(expr, seq);
        if (seq !== this.seq) return;
        this.stats.textContent = 'Load time: ' + Math.round(performance.now() - started) + ' ms · Result series: ' + n;
        this.root.dataset.state = 'done';
      } catch (e) {
        if (seq !== this.seq) return;
        this.result.replaceChildren();
        this.stats.textContent = '';
        this.messages.append(el('div', { class: 'error' }, e.message));
        this.root.dataset.state = 'error';
      }
    }
    async runTable(expr, seq) {
      const time = (this.state.end === null ? Date.now() : this.state.end) / 1000;
      const r = await api('query', { query: expr, time });
      if (seq !== this.seq) return 0;
      this.showNotes(r.warnings, r.infos);
      const d = r.data;
      const rows = [];
      if (d.resultType === 'vector') {
        for (const s of d.result) {
          const value = s.histogram ? el('span', {}, histogramText(s.histogram[1]), el('div', { class: 'buckets' }, (s.histogram[1].buckets || []).map((b) => bucketText(b)).join('  '))) : s.value[1];
          rows.push([labelNode(s.metric), value]);
        }
      } else if (d.resultType === 'matrix') {
        for (const s of d.result) {
          const vals = (s.values || []).map(([t, v]) => v + ' @' + t).concat((s.histograms || []).map(([t, h]) => histogramText(h) + ' @' + t));
          rows.push([labelNode(s.metric), el('span', {}, vals.map((v, i) => [i ? el('br') : null, v]))]);
        }
      } else if (d.resultType === 'scalar' || d.resultType === 'string') {
        rows.push([el('span', { class: 'labels' }, d.resultType), d.result[1]]);
      }
      if (!rows.length) {
        this.result.replaceChildren(el('div', { class: 'empty' }, 'Empty query result'));
        return 0;
      }
      this.result.replaceChildren(el('table', { class: 'series' }, el('tbody', {}, rows.map(([l, v]) => el('tr', {}, el('td', { class: 'labels-cell' }, l), el('td', { class: 'value' }, v))))));
      return rows.length;
    }
    async runGraph(expr, seq) {
      const end = this.state.end === null ? Date.now() : this.state.end;
      const start = end - this.state.range;
      const step = this.effectiveStep();
      const params = { query: expr, start: start / 1000, end: end / 1000, step: step / 1000 };
      const [r, ex] = await Promise.all([
        api('query_range', params),
        this.state.showExemplars ? api('query_exemplars', { query: expr, start: start / 1000, end: end / 1000 }).catch(() => ({ data: [] })) : Promise.resolve({ data: [] }),
      ]);
      if (seq !== this.seq) return 0;
      this.showNotes(r.warnings, r.infos);
      if (r.data.resultType !== 'matrix') throw new Error('the graph needs a range query result, got ' + r.data.resultType);
      if (!r.data.result.length) {
        this.chart = null;
        this.result.replaceChildren(el('div', { class: 'empty' }, 'Empty query result'));
        return 0;
      }
      const colorOf = new Map(r.data.result.map((s, i) => [labelText(s.metric), COLORS[i % COLORS.length]]));
      const exemplars = [];
      for (const group of ex.data || []) {
        const color = colorOf.get(labelText(group.seriesLabels)) || '#24292f';
        for (const e of group.exemplars || []) exemplars.push({ t: e.timestamp * 1000, v: parseFloat(e.value), labels: e.labels || {}, series: group.seriesLabels, color });
      }
      this.chart = new Chart(this, r.data.result, start, end, step, exemplars);
      this.chart.mount(this.result);
      return r.data.result.length;
    }
  }
  function bucketText(b) {
    // [boundary rule, lower, upper, count]: 0 (lower], 1 [upper), 2 (), 3 [].
    const open = b[0] === 3 || b[0] === 1 ? '[' : '(';
    const close = b[0] === 3 || b[0] === 0 ? ']' : ')';
    return open + b[1] + ', ' + b[2] + close + ': ' + b[3];
  }

  function addPanel(state) {
    const p = new Panel(state);
    panels.push(p);
    document.getElementById('panels').append(p.root);
    return p;
  }
  document.getElementById('add-panel').addEventListener('click', () => {
    const p = addPanel(defaultPanel());
    encodePanels();
    p.textarea.focus();
  });
  let window_resize = null;
  window.addEventListener('resize', () => {
    clearTimeout(window_resize);
    window_resize = setTimeout(() => panels.forEach((p) => p.chart && p.chart.draw()), 150);
  });

  window.Sluice.onTenantChange(() => {
    metricNames = null;
    labelCache.clear();
    panels.forEach((p) => p.execute());
  });

  const initial = decodePanels(location.search);
  if (!initial.length) initial.push(defaultPanel());
  initial.forEach((s) => addPanel(s));
  encodePanels();
  panels.forEach((p) => { if (p.state.expr) { p.check(); p.execute(); } });
  if (panels.length === 1 && !panels[0].state.expr) panels[0].textarea.focus();
  metrics();
}());
