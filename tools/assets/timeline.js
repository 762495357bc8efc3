(function () {
  var detail = document.getElementById('detail');
  var spans = document.querySelectorAll('rect.span');
  for (var i = 0; i < spans.length; i++) {
    spans[i].addEventListener('mouseenter', function (e) {
      detail.textContent = e.target.getAttribute('data-detail');
    });
  }
  var wave = document.getElementById('wave');
  document.body.setAttribute('data-ready', 'lanes=' + document.querySelectorAll('g.lane').length +
      ' links=' + document.querySelectorAll('path.link').length + ' spans=' + spans.length +
      ' critical=' + document.querySelectorAll('rect.critical').length +
      ' waits=' + document.querySelectorAll('rect.wait-late-sender, rect.wait-late-receiver, rect.wait-transfer, rect.wait-collective').length +
      ' chunks=' + new Set(Array.prototype.map.call(document.querySelectorAll('rect[data-chunk]'),
                                                    function (r) { return r.getAttribute('data-chunk'); })).size);
})();
