window.lensErrors = [];
window.addEventListener('error', function (e) { window.lensErrors.push(String(e.message)); });
(function () {
  var error = console.error;
  console.error = function () {
    window.lensErrors.push(Array.prototype.join.call(arguments, ' '));
    error.apply(console, arguments);
  };
})();
