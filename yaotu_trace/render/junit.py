"""JUnit XML of a `trace check` report: one test case per check, for CI test dashboards."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from yaotu_trace.data.report import Report, to_builtins
from yaotu_trace.render.views.checks import expected, show_value


def render_junit(report: Report) -> str:
    """A `<testsuites>` document; failures carry the check's message, skips their reason, and a
    warned check passes with its warning first in its output."""
    section = report.sections.get("checks")
    data: dict[str, Any] = to_builtins(section) if section is not None else {
        "results": [], "passed": 0, "failed": 0, "skipped": 0}
    results = data["results"]
    attrs = {"name": "trace check", "tests": str(len(results)), "failures": str(data["failed"]),
             "errors": "0", "skipped": str(data["skipped"])}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {**attrs, "name": f"trace check {report.input.path}"})
    props = ET.SubElement(suite, "properties")
    observed = data.get("fail_on_observed")
    margins = None if not observed else (f"{observed['points'] * 100:g} points and "
                                         f"{observed['relative'] * 100:g} %")
    for key, value in (("trace", report.input.path), ("baseline", data.get("baseline_path")),
                       ("before", data.get("before_path")),
                       ("check_file", data.get("config_path")),
                       ("fail_on_observed", margins)):
        if value:
            ET.SubElement(props, "property", {"name": key, "value": str(value)})
    for r in results:
        case = ET.SubElement(suite, "testcase", {"classname": f"trace.check.{r['kind']}",
                                                 "name": r["name"]})
        detail = (f"path: {r['path']}\nvalue: {show_value(r['value'])}\n"
                  f"expected: {expected(r)}\n{r['message']}")
        if r["status"] == "failed":
            failure = ET.SubElement(case, "failure", {"message": f"{r['name']}: {r['message']}",
                                                      "type": r["kind"]})
            failure.text = detail
        elif r["status"] == "skipped":
            ET.SubElement(case, "skipped", {"message": r["message"]})
        elif r["status"] == "warned":
            # JUnit has no warning: the case passes and says so where dashboards show output.
            ET.SubElement(case, "system-out").text = f"warning: {r['message']}\n{detail}"
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
