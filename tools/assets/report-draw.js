(function () {
  var data = JSON.parse(document.getElementById('lens-data').textContent);
  var colours = ['#3d7dd8', '#3aa564', '#e8912d', '#d62728', '#8e44ad', '#17becf', '#8c564b',
                 '#e377c2', '#7f7f7f', '#bcbd22'];
  function points(xs, ys) {
    var out = [];
    for (var i = 0; i < xs.length; i++) out.push({x: xs[i], y: ys[i]});
    return out;
  }
  function flat(x0, x1, y) { return [{x: x0, y: y}, {x: x1, y: y}]; }
  function options(xTitle, yTitle, stacked) {
    return {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
      interaction: {mode: 'nearest', intersect: false},
      scales: {
        x: {type: 'linear', title: {display: true, text: xTitle}},
        y: {stacked: !!stacked, beginAtZero: true, title: {display: true, text: yTitle}}
      },
      plugins: {legend: {position: 'bottom'}}
    };
  }
  var charts = {};
  function draw(id, config) { charts[id] = new Chart(document.getElementById(id), config); }
  var s = data.step, last = s.x.length ? s.x[s.x.length - 1] : 0, first = s.x.length ? s.x[0] : 0;
  var stepSets = [
    {label: data.bucket > 1 ? 'step time (mean of ' + data.bucket + ' steps)' : 'step time',
     data: points(s.x, s.mean), borderColor: colours[0], pointRadius: 0, borderWidth: 1.2},
    {label: 'p50 ' + data.p50_ms.toFixed(2) + ' ms', data: flat(first, last, data.p50_ms),
     borderColor: colours[1], borderDash: [6, 3], pointRadius: 0, borderWidth: 1},
    {label: 'p95 ' + data.p95_ms.toFixed(2) + ' ms', data: flat(first, last, data.p95_ms),
     borderColor: colours[2], borderDash: [6, 3], pointRadius: 0, borderWidth: 1}];
  if (data.bucket > 1)
    stepSets.splice(1, 0, {label: 'slowest step of each ' + data.bucket, data: points(s.x, s.max),
                           borderColor: '#9ab8e8', pointRadius: 0, borderWidth: 1});
  data.markers.forEach(function (m, i) {
    stepSets.push({type: 'scatter', label: m.label, data: [{x: m.step, y: m.ms}],
                   borderColor: colours[3 + (i % 5)], backgroundColor: colours[3 + (i % 5)],
                   pointStyle: 'triangle', pointRadius: 9});
  });
  draw('chart-step', {type: 'line', data: {datasets: stepSets},
                      options: options('step', 'ms')});
  var parts = [['compute', '#3d7dd8'], ['waits', '#f08c84'], ['transfer', '#f2c14e'],
               ['rest', '#b8b8b8']];
  data.stages.forEach(function (st, i) {
    draw('chart-stage-' + i, {type: 'line', data: {datasets: parts.map(function (p) {
      return {label: p[0], data: points(st.x, st[p[0]]), borderColor: p[1],
              backgroundColor: p[1], fill: true, pointRadius: 0, borderWidth: 0.5};
    })}, options: options('step', 'ms (stacked)', true)});
    charts['chart-stage-' + i].options.plugins.title = {display: true, text: st.label};
    charts['chart-stage-' + i].update();
  });
  draw('chart-critical', {type: 'bar', data: {
    labels: data.stages.map(function (st) { return st.label; }),
    datasets: [{label: 'p50 share of the critical path', backgroundColor: colours[3],
                data: data.stages.map(function (st) { return 100 * st.critical_share_p50; })},
               {label: 'p95', backgroundColor: '#f4a6a6',
                data: data.stages.map(function (st) { return 100 * st.critical_share_p95; })}]},
    options: {animation: false, responsive: true, maintainAspectRatio: false,
              scales: {y: {beginAtZero: true, title: {display: true, text: '%'}}},
              plugins: {legend: {position: 'bottom'}}}});
  var b = data.bubble, bubbleSets = [{label: 'measured (stages\u2019 mean idle share)',
      data: points(b.x, b.measured), borderColor: colours[0], pointRadius: 0, borderWidth: 1.2}];
  if (b.theoretical !== null)
    bubbleSets.push({label: 'schedule ' + b.formula + ' = ' + b.theoretical.toFixed(3),
                     data: flat(first, last, b.theoretical), borderColor: colours[2],
                     borderDash: [6, 3], pointRadius: 0, borderWidth: 1});
  draw('chart-bubble', {type: 'line', data: {datasets: bubbleSets},
                        options: options('step', 'share of the forward-backward window')});
  function clockSets(field) {
    return data.clock.map(function (c, i) {
      return {label: 'rank ' + c.rank, data: points(c.t_s, c[field]),
              borderColor: colours[i % colours.length], pointRadius: 2, borderWidth: 1};
    });
  }
  draw('chart-clock-offset', {type: 'line', data: {datasets: clockSets('offset_us')},
       options: options('seconds into the run', 'offset to the reference (\u00b5s)')});
  charts['chart-clock-offset'].options.scales.y.beginAtZero = false;
  charts['chart-clock-offset'].update();
  draw('chart-clock-uncertainty', {type: 'line', data: {datasets: clockSets('uncertainty_us')},
       options: options('seconds into the run', 'uncertainty (\u00b5s)')});
  var rendered = {};
  Object.keys(charts).forEach(function (id) {
    var c = charts[id];
    rendered[id] = {type: c.config.type, labels: c.data.labels || null,
                    datasets: c.data.datasets.map(function (d) {
                      return {label: d.label, data: d.data.map(function (p) {
                        return typeof p === 'object' ? [p.x, p.y] : p; })};
                    })};
  });
  document.getElementById('rendered').textContent = JSON.stringify(rendered);
  document.body.setAttribute('data-ready', 'charts=' + Object.keys(charts).length +
      ' canvases=' + document.querySelectorAll('canvas').length +
      ' waves=' + document.querySelectorAll('svg.wave').length +
      ' errors=' + window.lensErrors.length);
})();
