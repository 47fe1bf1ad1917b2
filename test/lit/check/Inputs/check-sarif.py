"""Reads a SARIF 2.1.0 log on stdin, checks the properties CI systems rely
on (the ones GitHub code scanning requires), and prints one line per result
for FileCheck: ruleId, level, uri:line:column, and the related locations."""
import json
import sys

log = json.load(sys.stdin)
assert log["version"] == "2.1.0", log["version"]
assert log["$schema"].endswith("sarif-schema-2.1.0.json"), log["$schema"]
assert len(log["runs"]) == 1
run = log["runs"][0]
driver = run["tool"]["driver"]
assert driver["name"] == "md"
rules = driver["rules"]
ids = [rule["id"] for rule in rules]
assert len(ids) == len(set(ids)), "duplicate rule ids"
for rule in rules:
    assert rule["shortDescription"]["text"]
print("rules:", " ".join(ids))


def where(location):
    physical = location["physicalLocation"]
    uri = physical["artifactLocation"]["uri"]
    region = physical.get("region")
    if region is None:
        return uri
    assert region["startLine"] >= 1 and region.get("startColumn", 1) >= 1
    return "%s:%d:%d" % (uri, region["startLine"], region.get("startColumn", 0))


for result in run["results"]:
    assert result["level"] in ("error", "warning", "note", "none")
    assert ids[result["ruleIndex"]] == result["ruleId"]
    assert result["message"]["text"]
    assert len(result["locations"]) == 1
    related = result.get("relatedLocations", [])
    for i, location in enumerate(related):
        assert location["id"] == i + 1
        assert location["message"]["text"]
    print("result:", result["ruleId"], result["level"], where(result["locations"][0]))
    for location in related:
        print("  related:", where(location), location["message"]["text"])
    print("  plans:", ",".join(result["properties"]["plans"]))
