// ferry console: "select all" for the checkboxes of a listing. Everything
// works without it.
document.addEventListener("change", function (ev) {
  var box = ev.target;
  if (!box.classList || !box.classList.contains("select-all")) return;
  var form = box.closest("form");
  if (!form) return;
  form.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (b) { b.checked = box.checked; });
});
