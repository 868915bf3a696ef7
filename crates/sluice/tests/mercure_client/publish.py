"""Publishes updates to a Mercure hub with the mercure-publisher library (PyPI), used as its
users use it: the library makes the publisher token and posts the form.

Usage: PUBLISHER_JWT_KEY=<key> publish.py <hub URL> < request.json, where request.json is
{"publish_topics": [selectors the token grants], "updates": [update, ...]} and each update
holds the arguments of MercurePublisher.publish: "topic" (a string or a list), "data" (a
string, or an object the library sends as JSON), and optionally "private", "id", "type" and
"retry". Prints one JSON line per update: {"id": <the hub's answer>}, or {"status": <code>,
"body": <answer>} when the library reports a refusal.
"""

import json
import os
import sys

from mercure_publisher import MercureConfig, MercurePublisher, MercurePublishError


def main() -> None:
    hub_url = sys.argv[1]
    request = json.load(sys.stdin)
    config = MercureConfig(
        hub_url=hub_url,
        publisher_jwt_key=os.environ["PUBLISHER_JWT_KEY"],
        publish_topics=request["publish_topics"],
    )
    with MercurePublisher(config) as publisher:
        for update in request["updates"]:
            options = dict(update)
            topic = options.pop("topic")
            data = options.pop("data")
            try:
                answer = {"id": publisher.publish(topic, data, **options)}
            except MercurePublishError as err:
                answer = {"status": err.status_code, "body": err.response_body}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
