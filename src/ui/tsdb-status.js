// The cardinality page: /api/v1/status/tsdb as tables, each row a link to
// the query page showing those series. Its filters live in the URL.
'use strict';

(function () {
  const { apiGet, el, formatTime, formatBytes, parseDuration } = window.Sluice;
  const form = document.getElementById('filters');
  const out = document.getElementById('tsdb');
  const messages = document.querySelector('.messages');
  const fields = ['match', 'focusLabel', 'scope', 'range', 'date', 'limit'];

  const q0 = new URLSearchParams(location.search);
  for (const f of fields) if (q0.get(f) !== null) form.elements[f].value = q0.get(f);
  if (!form.elements.date.value) form.elements.date.value = new Date().toISOString().slice(0, 10);
  const showScope = () => {
    form.elements.range.hidden = form.elements.scope.value !== 'range';
    form.elements.date.hidden = form.elements.scope.value !== 'day';
  };
  form.elements.scope.addEventListener('change', showScope);
  showScope();

  // A selector for one label pair, quoting what PromQL needs quoted.
  const legacy = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
  const name = (n) => (legacy.test(n) ? n : JSON.stringify(n));
  const pair = (n, v) => name(n) + '=' + JSON.stringify(v);
  const queryLink = (expr) => '/query?' + new URLSearchParams({ 'g0.expr': expr, 'g0.tab': 'table' });
  const metricSelector = (m) => (/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(m) ? m : '{' + JSON.stringify(m) + '}');

  function table(title, rows, head, link, total) {
    const t = el('table', { class: 'series stats-table', 'data-list': title.id },
      el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
      el('tbody', {}, rows.map((r) => el('tr', {},
        el('td', {}, link ? el('a', { href: queryLink(link(r.name)) }, r.name) : r.name),
        el('td', { class: 'value' }, title.bytes ? formatBytes(r.value) : String(r.value)),
        total ? el('td', { class: 'value' }, (100 * r.value / total).toFixed(1) + '%') : null))));
    return el('section', { class: 'stats' }, el('h2', {}, title.text), rows.length ? t : el('div', { class: 'empty' }, 'Nothing to count'));
  }

  function render(d, limit, focus) {
    const h = d.headStats;
    const empty = h.numSeries === 0;
    const time = (ms) => (empty ? 'No datapoints yet' : formatTime(ms) + ' UTC');
    const headRows = [
      ['Number of series', h.numSeries], ['Number of chunks', h.chunkCount],
      ['Number of label pairs', h.numLabelPairs], ['Current min time', time(h.minTime)],
      ['Current max time', time(h.maxTime)],
    ];
    const total = d.totalSeries;
    const sections = [
      el('section', { class: 'stats' }, el('h2', {}, 'Head stats'),
        el('table', { class: 'series stats-table', 'data-list': 'head' }, el('tbody', {}, headRows.map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', { class: 'value' }, String(v))))))),
      table({ id: 'metric', text: 'Top ' + limit + ' series count by metric name' }, d.seriesCountByMetricName, ['Name', 'Count', 'Share'], metricSelector, total),
      table({ id: 'values', text: 'Top ' + limit + ' label names with value count' }, d.labelValueCountByLabelName, ['Name', 'Count'], (n) => 'count(count by (' + name(n) + ') ({' + name(n) + '!=""}))'),
      table({ id: 'memory', text: 'Top ' + limit + ' label names with high memory usage', bytes: true }, d.memoryInBytesByLabelName, ['Name', 'Bytes'], null),
      table({ id: 'pairs', text: 'Top ' + limit + ' series count by label value pairs' }, d.seriesCountByLabelValuePair, ['Name', 'Count', 'Share'], (p) => {
        const i = p.indexOf('=');
        return 'count by (__name__) ({' + pair(p.slice(0, i), p.slice(i + 1)) + '})';
      }, total),
      table({ id: 'names', text: 'Top ' + limit + ' label names by series' }, d.seriesCountByLabelName || [], ['Name', 'Count', 'Share'], (n) => 'count by (__name__) ({' + name(n) + '!=""})', total),
    ];
    if (focus && d.seriesCountByFocusLabelValue) {
      sections.splice(1, 0, table({ id: 'focus', text: 'Top ' + limit + ' series count by ' + focus + ' value' }, d.seriesCountByFocusLabelValue, ['Value', 'Count', 'Share'], (v) => 'count by (__name__) ({' + pair(focus, v) + '})', total));
    }
    out.replaceChildren(el('p', { class: 'summary' }, total + ' series, ' + d.totalLabelValuePairs + ' labels in all'), ...sections);
  }

  let loads = 0;
  async function load() {
    const f = form.elements;
    const limit = Math.max(1, Math.min(10000, parseInt(f.limit.value, 10) || 10));
    const params = { limit };
    if (f.match.value.trim()) params['match[]'] = f.match.value.trim();
    if (f.focusLabel.value.trim()) params.focusLabel = f.focusLabel.value.trim();
    if (f.scope.value === 'day' && f.date.value) params.date = f.date.value;
    if (f.scope.value === 'range') {
      const ms = parseDuration(f.range.value) || 86400000;
      const end = Date.now();
      params.start = (end - ms) / 1000;
      params.end = end / 1000;
    }
    const q = new URLSearchParams();
    for (const k of fields) if (f[k].value && !(k === 'scope' && f[k].value === 'head')) q.set(k, f[k].value);
    history.replaceState(null, '', '/tsdb-status' + (String(q) ? '?' + q : ''));
    const seq = ++loads;
    document.body.dataset.state = 'running';
    messages.replaceChildren();
    try {
      const r = await apiGet('status/tsdb', params);
      if (seq !== loads) return;
      render(r.data, limit, params.focusLabel);
      document.body.dataset.state = 'done';
    } catch (e) {
      if (seq !== loads) return;
      messages.replaceChildren(el('div', { class: 'error' }, e.message));
      out.replaceChildren();
      document.body.dataset.state = 'error';
    }
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); load(); });
  window.Sluice.onTenantChange(load);
  load();
}());
