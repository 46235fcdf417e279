"""A rank of a node reading a remote set through the shared shard cache (the environment
names the server, the credentials and FASTLOAD_CACHE): waits for the file argv[2] so that
both ranks start together, reads every record, prints the records' digest and how many
shards this process downloaded."""

import hashlib
import json
import os
import sys
import time

from fastload.data.remote.sets import open_url
from fastload.data.remote.url import locate

url, go = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.01)
reader = open_url(locate(url))
digest = hashlib.sha256()
for i in range(len(reader)):
    digest.update(reader.record(i))
print(json.dumps({"digest": digest.hexdigest(), "downloads": reader.cache.downloads}))
