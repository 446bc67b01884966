"""Every page at desktop (1280x800) and phone (390x844) size, in the light and the dark theme
(prefers-color-scheme), checked by axe-core (npm, run in the page): no serious or critical violation;
and at phone size no page is wider than the screen (wide tables scroll inside their frame). The chat,
a board and the expert queue are photographed at phone size in both themes
(test-artifacts/screenshots/). And every page speaks plainly: no contract function or event name, no
formula symbol outside the page that explains them, no encoder name, repository path or error text
(world.JARGON)."""

from __future__ import annotations

import pytest


from .conftest import ARTIFACTS, REPO
from .world import build, jargon_on, log_in

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"
SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SCHEMES = ("light", "dark")
PHOTOGRAPHED = {"conversation", "board-context", "queue"}
RUN_AXE = """async () => {
    const result = await axe.run(document, {resultTypes: ["violations"]});
    return result.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
        id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + " :: " + (n.failureSummary || "").slice(0, 200))}));
}"""


def visit(chromium, site, who: str, size: str, scheme: str):
    """A browser context of `who` (signed in unless anonymous) at `size` in `scheme`. axe-core is put
    into each page by Playwright, past the site's Content-Security-Policy (bypass_csp), which would
    otherwise refuse a script it did not serve."""
    context = chromium.new_context(base_url=site.url, viewport=SIZES[size], color_scheme=scheme,
                                   bypass_csp=True, is_mobile=size == "phone", has_touch=size == "phone")
    page = context.new_page()
    if who != "anonymous":
        log_in(page, who)
    return context, page


def test_every_page_passes_axe_and_fits_a_phone_in_both_themes(site, chromium, tmp_path):
    world = build(tmp_path)
    problems, checked = [], 0
    for size in SIZES:
        for scheme in SCHEMES:
            for who, pages in world.pages().items():
                context, page = visit(chromium, site, who, size, scheme)
                try:
                    for name, path in pages:
                        page.goto(path)
                        page.wait_for_load_state("networkidle")
                        page.add_script_tag(path=str(AXE))
                        for v in page.evaluate(RUN_AXE):
                            problems.append(f"{size}/{scheme} {name} ({path}): {v['impact']} {v['id']}: {v['help']}"
                                            f"\n      " + "\n      ".join(v["nodes"]))
                        checked += 1
                        if (size, scheme) == ("desktop", "light"):
                            problems.extend(jargon_on(page, name))
                        if size == "phone":
                            # Against the screen's width: a mobile viewport grows to fit what overflows it.
                            wide = page.evaluate("document.documentElement.scrollWidth") - SIZES[size]["width"]
                            if wide > 0:
                                problems.append(f"phone/{scheme} {name} ({path}): the page is {wide} px wider "
                                                "than the screen")
                            if name in PHOTOGRAPHED:
                                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                                page.screenshot(path=str(ARTIFACTS / f"phone-{scheme}-{name}.png"), full_page=True)
                finally:
                    context.close()
    assert checked == 4 * sum(len(p) for p in world.pages().values())
    assert not problems, f"{len(problems)} problems on {checked} page views:\n" + "\n".join(problems)
