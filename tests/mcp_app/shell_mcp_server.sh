#!/bin/sh
# A minimal stdio MCP server in POSIX sh (busybox sh is enough): a test fixture for images without python.
#
# Reads newline-delimited JSON-RPC on stdin and answers on stdout: initialize (echoes the client's protocol
# version), notifications (no answer), tools/list, tools/call, ping, and -32601 for any other request (the SDK's
# `server/discover` probe among them, which sends it back to the initialize handshake). Fields are picked out
# with sed, which is enough for the one-line, key-ordered JSON the SDK writes. Tools:
#   echo {text}             -> the text, as sent (JSON escapes kept as they are)
#   whoami {}               -> "uid=<uid> gid=<gid> cwd=<dir>"
#   net_probe {host, port}  -> "connected host:port" or "refused host:port: <nc's reason>" (3 s timeout)
# Nothing but JSON-RPC is ever written to stdout; diagnostics go to stderr.

reply() {  # id, result JSON
    printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$1" "$2"
}

fail() {  # id, code, message
    printf '{"jsonrpc":"2.0","id":%s,"error":{"code":%s,"message":"%s"}}\n' "$1" "$2" "$3"
}

text_result() {  # id, text (already a JSON string body), isError
    reply "$1" "{\"content\":[{\"type\":\"text\",\"text\":\"$2\"}],\"isError\":$3}"
}

# The value of string key $1 in $2 (its last occurrence; JSON escapes kept), or nothing.
string_field() {
    printf '%s\n' "$2" | sed -n -E "s/.*\"$1\":\"(([^\"\\\\]|\\\\.)*)\".*/\\1/p" | head -n 1
}

# The value of number key $1 in $2, or nothing.
number_field() {
    printf '%s\n' "$2" | sed -n -E "s/.*\"$1\":(-?[0-9]+).*/\\1/p" | head -n 1
}

TOOLS='{"tools":[
{"name":"echo","description":"Echo the text back.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}},
{"name":"whoami","description":"Who the server runs as and where.","inputSchema":{"type":"object","properties":{}}},
{"name":"net_probe","description":"Try a TCP connection to host:port.","inputSchema":{"type":"object","properties":{"host":{"type":"string"},"port":{"type":"integer"}},"required":["host","port"]}}
]}'
TOOLS=$(printf '%s' "$TOOLS" | tr -d '\n')

call_tool() {  # id, the request line
    params=${2#*\"params\":}
    name=$(string_field name "${params%%\"arguments\":*}")
    case $name in
        echo)
            text_result "$1" "$(string_field text "$params")" false ;;
        whoami)
            text_result "$1" "uid=$(id -u) gid=$(id -g) cwd=$(pwd)" false ;;
        net_probe)
            host=$(string_field host "$params")
            port=$(number_field port "$params")
            case $host in *[!A-Za-z0-9.:-]*|'') text_result "$1" "bad host" true; return ;; esac
            [ -n "$port" ] || { text_result "$1" "bad port" true; return; }
            # -e true (last: it takes the rest as its command): hang up once connected (busybox nc has no -z)
            if reason=$(nc -w 3 "$host" "$port" -e true </dev/null 2>&1 >/dev/null); then
                text_result "$1" "connected $host:$port" false
            else
                reason=$(printf '%s' "$reason" | tr -d '"\\' | tr '\n\t' '  ')
                text_result "$1" "refused $host:$port: $reason" false
            fi ;;
        *)
            fail "$1" -32602 "unknown tool" ;;
    esac
}

while IFS= read -r line; do
    head=${line%%\"params\":*}  # id and method come before params in what the SDK writes
    id=$(printf '%s\n' "$head" | sed -n -E 's/.*"id":(-?[0-9]+|"[^"]*").*/\1/p')
    method=$(string_field method "$head")
    if [ -z "$id" ]; then
        continue  # a notification (notifications/initialized, notifications/cancelled, ...): no answer
    fi
    case $method in
        initialize)
            version=$(string_field protocolVersion "$line")
            reply "$id" "{\"protocolVersion\":\"${version:-2025-11-25}\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"shell-mcp\",\"version\":\"1.0\"}}" ;;
        ping)
            reply "$id" '{}' ;;
        tools/list)
            reply "$id" "$TOOLS" ;;
        tools/call)
            call_tool "$id" "$line" ;;
        *)
            fail "$id" -32601 "Method not found" ;;
    esac
done
