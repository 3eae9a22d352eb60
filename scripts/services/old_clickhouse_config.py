#!/usr/bin/env python3
"""Write a private config for Debian's ClickHouse 18.16 server.

Starts from the package's own /etc/clickhouse-server files so the server runs
with its stock settings, but confined: it listens on 127.0.0.1 and one HTTP
port only, and every path it writes to lies inside --dir. Nothing under /etc
or /var/lib/clickhouse is touched, so several copies can run side by side.

Usage: old_clickhouse_config.py --port N --dir DIR [--etc /etc/clickhouse-server]
Writes DIR/conf/config.xml and DIR/conf/users.xml.
"""

import argparse
import os
import shutil
import xml.etree.ElementTree as ET


def set_text(root, tag, text):
    elem = root.find(tag)
    if elem is None:
        elem = ET.SubElement(root, tag)
    elem.text = text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="HTTP port on 127.0.0.1")
    parser.add_argument("--dir", required=True, help="folder that receives conf/, data/ and log/")
    parser.add_argument("--etc", default="/etc/clickhouse-server", help="the package's config folder")
    args = parser.parse_args()

    base = os.path.abspath(args.dir)
    conf, data, logs = (os.path.join(base, d) for d in ("conf", "data", "log"))
    for d in (conf, data, logs):
        os.makedirs(d, exist_ok=True)

    # Keep the `incl` attributes as they are: they name sections of
    # /etc/metrika.xml, which does not exist, so the server prints "Include
    # not found" and leaves those features off. Dropping the attribute would
    # turn on an empty <zookeeper/>, and with tcp_port removed below the
    # server then exits at startup with "Not found: tcp_port".
    tree = ET.parse(os.path.join(args.etc, "config.xml"))  # drops comments
    root = tree.getroot()

    # HTTP only: the native and interserver ports would be two more ports to
    # find free, and the tests never use them (the server skips absent ports).
    for tag in ("listen_host", "tcp_port", "tcp_port_secure", "https_port",
                "interserver_http_port", "interserver_https_port", "mysql_port"):
        for elem in root.findall(tag):
            root.remove(elem)
    ET.SubElement(root, "listen_host").text = "127.0.0.1"
    set_text(root, "http_port", str(args.port))

    # With the trailing slashes of the stock config.
    set_text(root, "path", data + "/")
    set_text(root, "tmp_path", data + "/tmp/")
    set_text(root, "user_files_path", data + "/user_files/")
    set_text(root, "format_schema_path", data + "/format_schemas/")
    set_text(root, "users_config", os.path.join(conf, "users.xml"))

    logger = root.find("logger")
    if logger is None:
        logger = ET.SubElement(root, "logger")
    set_text(logger, "log", os.path.join(logs, "clickhouse-server.log"))
    set_text(logger, "errorlog", os.path.join(logs, "clickhouse-server.err.log"))

    tree.write(os.path.join(conf, "config.xml"), encoding="utf-8", xml_declaration=True)

    shutil.copyfile(os.path.join(args.etc, "users.xml"), os.path.join(conf, "users.xml"))


if __name__ == "__main__":
    main()
