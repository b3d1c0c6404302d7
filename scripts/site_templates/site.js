// The framework chooser of a task page and of the concordance: which columns show, kept in the
// URL's hash (task.html#pytorch,jax), so that a link can choose them. A hash naming a cell
// (task.html#cell-jax-c12, the concordance's links) shows PyTorch beside that cell's framework and
// scrolls to the cell. No reload, no server.
(function () {
  "use strict";
  const chooser = document.getElementById("chooser");
  if (!chooser) return;
  const boxes = Array.from(chooser.querySelectorAll("input[type=checkbox]"));
  const known = boxes.map((box) => box.value);

  // The frameworks a hash names: none for "#none", the default pair without a hash, and null
  // (leave the columns as they are) for any other hash, such as a section's anchor.
  function fromHash() {
    const hash = decodeURIComponent(location.hash.slice(1));
    if (hash === "none") return [];
    if (!hash) return chooser.dataset.default.split(",");
    const names = hash.split(",").filter((name) => known.includes(name));
    return names.length ? names : null;
  }

  function show(names) {
    if (!names) return;
    boxes.forEach((box) => { box.checked = names.includes(box.value); });
    document.querySelectorAll("[data-framework]").forEach((el) => {
      el.classList.toggle("off", !names.includes(el.dataset.framework));
    });
  }

  const bar = document.querySelector(".bar");
  function scrollBelowBar(target) {
    window.scrollTo({top: target.getBoundingClientRect().top + window.scrollY - bar.offsetHeight - 8});
  }

  // A cell's anchor: show its framework (beside PyTorch), mark the cell and bring it into view.
  function toCell() {
    const hash = decodeURIComponent(location.hash.slice(1));
    const cell = hash.startsWith("cell-") ? document.getElementById(hash) : null;
    if (!cell) return false;
    const framework = cell.closest("[data-framework]").dataset.framework;
    const defaults = chooser.dataset.default.split(",");
    show(defaults.includes(framework) ? defaults : [known[0], framework]);
    document.querySelectorAll(".target").forEach((el) => el.classList.remove("target"));
    cell.classList.add("target");
    scrollBelowBar(cell);
    return true;
  }

  chooser.addEventListener("change", () => {
    const names = boxes.filter((box) => box.checked).map((box) => box.value);
    show(names);
    location.replace("#" + (names.join(",") || "none"));   // a same-page hash: no reload
  });
  window.addEventListener("hashchange", () => toCell() || show(fromHash()));

  // The step links scroll below the sticky bar and keep the chosen frameworks in the hash.
  document.querySelectorAll(".steps a").forEach((link) => {
    link.addEventListener("click", (event) => {
      const target = document.getElementById(link.getAttribute("href").slice(1));
      if (!target) return;
      event.preventDefault();
      scrollBelowBar(target);
    });
  });
  if (!toCell()) show(fromHash());
  // The browser's own jump to the anchor comes after this script: scroll again once the page is loaded.
  window.addEventListener("load", () => setTimeout(toCell, 0));
})();
