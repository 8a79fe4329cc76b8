// The rules and alerts pages: /api/v1/rules as one section per group,
// for the tenant in the tenant box. The rules page lists every rule with
// its health and last evaluation; the alerts page lists the alerting
// rules by state, each with its alerts. Filters live in the URL.
'use strict';

(function () {
  const { apiGet, el, formatTime, formatDuration, labelNode } = window.Sluice;
  const out = document.getElementById('rules');
  const view = out.dataset.view;
  const form = document.getElementById('filters');
  const messages = document.querySelector('.messages');
  const checks = ['firing', 'pending', 'inactive'];

  const q0 = new URLSearchParams(location.search);
  if (q0.get('search') !== null) form.elements.search.value = q0.get('search');
  if (view === 'rules' && q0.get('health') !== null) form.elements.health.value = q0.get('health');
  if (view === 'alerts' && q0.get('state') !== null) {
    const on = q0.get('state').split(',');
    for (const c of checks) form.elements[c].checked = on.includes(c);
  }

  const queryLink = (expr) => '/query?' + new URLSearchParams({ 'g0.expr': expr, 'g0.tab': 'table' });
  const ms = (t) => Date.parse(t);
  const never = (t) => !t || t.startsWith('0001-01-01');
  const when = (t) => (never(t) ? 'never' : formatTime(ms(t)) + ' UTC');
  const took = (s) => (s >= 1 ? s.toFixed(3) + 's' : (s * 1000).toFixed(3) + 'ms');
  const labelsOf = (o) => labelNode(o || {});
  const expr = (r) => el('a', { class: 'expr', href: queryLink(r.query) }, el('code', {}, r.query));

  function groupHead(g, extra) {
    return el('div', { class: 'group-head' },
      el('h2', {}, g.name),
      el('span', { class: 'meta' },
        g.file + ' · every ' + formatDuration(Math.round(g.interval * 1000)) +
        (g.limit ? ' · limit ' + g.limit : '') +
        ' · last evaluated ' + when(g.lastEvaluation) + ' in ' + took(g.evaluationTime || 0)),
      extra || null);
  }

  function ruleRow(r) {
    const name = r.type === 'alerting' ? 'alert: ' + r.name : 'record: ' + r.name;
    const detail = [expr(r)];
    if (r.type === 'alerting' && r.duration) detail.push(el('div', { class: 'meta' }, 'for ' + formatDuration(r.duration * 1000)));
    if (r.type === 'alerting' && r.keepFiringFor) detail.push(el('div', { class: 'meta' }, 'keep firing for ' + formatDuration(r.keepFiringFor * 1000)));
    if (r.labels && Object.keys(r.labels).length) detail.push(el('div', { class: 'meta' }, 'labels ', labelsOf(r.labels)));
    if (r.lastError) detail.push(el('div', { class: 'rule-error' }, r.lastError));
    return el('tr', { 'data-health': r.health },
      el('td', { class: 'rule-name' }, name),
      el('td', {}, detail),
      el('td', {}, el('span', { class: 'badge ' + r.health }, r.health)),
      el('td', {}, when(r.lastEvaluation)),
      el('td', { class: 'value' }, took(r.evaluationTime || 0)));
  }

  function renderRules(groups) {
    const f = form.elements;
    const needle = f.search.value.trim().toLowerCase();
    const health = f.health.value;
    const sections = [];
    for (const g of groups) {
      const groupHit = !needle || g.name.toLowerCase().includes(needle) || g.file.toLowerCase().includes(needle);
      const rules = g.rules.filter((r) => (!health || r.health === health) &&
        (groupHit || r.name.toLowerCase().includes(needle) || r.query.toLowerCase().includes(needle)));
      if (!rules.length) continue;
      sections.push(el('section', { class: 'group', 'data-group': g.name },
        groupHead(g),
        el('table', { class: 'series rules' },
          el('thead', {}, el('tr', {}, ['Rule', 'Expression', 'Health', 'Last evaluation', 'Took'].map((h) => el('th', {}, h)))),
          el('tbody', {}, rules.map(ruleRow)))));
    }
    return sections;
  }

  function alertTable(alerts) {
    return el('table', { class: 'series alerts' },
      el('thead', {}, el('tr', {}, ['Labels', 'State', 'Active since', 'Value', 'Annotations'].map((h) => el('th', {}, h)))),
      el('tbody', {}, alerts.map((a) => el('tr', { 'data-state': a.state },
        el('td', {}, labelsOf(a.labels)),
        el('td', {}, el('span', { class: 'badge ' + a.state }, a.state)),
        el('td', {}, when(a.activeAt)),
        el('td', { class: 'value', title: a.value }, String(Number(a.value))),
        el('td', {}, Object.keys(a.annotations || {}).sort().map((k) =>
          el('div', { class: 'annotation' }, el('span', { class: 'name' }, k), ': ', a.annotations[k])))))));
  }

  function renderAlerts(groups) {
    const f = form.elements;
    const needle = f.search.value.trim().toLowerCase();
    const on = checks.filter((c) => f[c].checked);
    const counts = { firing: 0, pending: 0, inactive: 0 };
    const sections = [];
    for (const g of groups) {
      const rules = g.rules.filter((r) => r.type === 'alerting');
      rules.forEach((r) => { counts[r.state] = (counts[r.state] || 0) + 1; });
      const shown = rules.filter((r) => on.includes(r.state) && (!needle ||
        g.name.toLowerCase().includes(needle) || r.name.toLowerCase().includes(needle) ||
        (r.alerts || []).some((a) => JSON.stringify(a.labels).toLowerCase().includes(needle))));
      if (!shown.length) continue;
      sections.push(el('section', { class: 'group', 'data-group': g.name },
        groupHead(g),
        shown.map((r) => el('details', { class: 'alert-rule', 'data-state': r.state, open: r.state !== 'inactive' },
          el('summary', {},
            el('span', { class: 'badge ' + r.state }, r.state + ((r.alerts || []).length ? ' (' + r.alerts.length + ')' : '')),
            ' ', el('span', { class: 'rule-name' }, r.name)),
          el('div', { class: 'alert-body' },
            expr(r),
            r.duration ? el('div', { class: 'meta' }, 'for ' + formatDuration(r.duration * 1000)) : null,
            r.lastError ? el('div', { class: 'rule-error' }, r.lastError) : null,
            (r.alerts || []).length ? alertTable(r.alerts) : null)))));
    }
    const summary = el('p', { class: 'summary' },
      counts.firing + ' firing, ' + counts.pending + ' pending, ' + counts.inactive + ' inactive');
    return [summary, ...sections];
  }

  let loads = 0;
  let last = null;
  function show() {
    if (!last) return;
    const sections = view === 'rules' ? renderRules(last) : renderAlerts(last);
    const nothing = last.length ? 'No rule matches the filters' : 'No rule groups for this tenant';
    const real = sections.filter((s) => s.tagName === 'SECTION');
    out.replaceChildren(...sections, real.length ? '' : el('div', { class: 'empty' }, nothing));
    const f = form.elements;
    const q = new URLSearchParams();
    if (f.search.value.trim()) q.set('search', f.search.value.trim());
    if (view === 'rules' && f.health.value) q.set('health', f.health.value);
    if (view === 'alerts') {
      const on = checks.filter((c) => f[c].checked);
      if (on.length !== checks.length) q.set('state', on.join(','));
    }
    history.replaceState(null, '', location.pathname + (String(q) ? '?' + q : ''));
  }
  async function load() {
    const seq = ++loads;
    // Another tenant's groups are not shown while this one's come.
    last = null;
    out.replaceChildren();
    document.body.dataset.state = 'running';
    messages.replaceChildren();
    try {
      const r = await apiGet('rules', view === 'alerts' ? { type: 'alert' } : {});
      if (seq !== loads) return;
      last = r.data.groups || [];
      show();
      document.body.dataset.state = 'done';
    } catch (e) {
      if (seq !== loads) return;
      messages.replaceChildren(el('div', { class: 'error' }, e.message));
      out.replaceChildren();
      document.body.dataset.state = 'error';
    }
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); show(); });
  form.addEventListener('input', show);
  form.addEventListener('change', show);
  window.Sluice.onTenantChange(load);
  load();
}());
