// The CLI's `--where` syntax (README "larder search"), clauses joined by " and ", into SEARCH's JSON filter.
//   price<50 and store~mart   ->  {"and": [{"field":"price","op":"lt","value":50}, {...contains...}]}

const operators = [
  ["!=", "ne"], ["<=", "lte"], [">=", "gte"], ["^=", "prefix"], ["=", "eq"], ["<", "lt"], [">", "gt"], ["~", "contains"],
];

function value(text, op) {
  if (op === "contains" || op === "prefix") return text;
  if (/^[\[{"]/.test(text) || /^(-?\d|true$|false$|null$)/.test(text)) {
    try { return JSON.parse(text); } catch { if (/^[\[{"]/.test(text)) throw new Error(`not JSON: ${text}`); }
  }
  if (text.startsWith("[") && text.endsWith("]")) return text.slice(1, -1).split(",");
  return text;
}

/** One clause: `F=V`, `F!=V`, `F<V`, `F<=V`, `F>V`, `F>=V`, `F~TEXT`, `F^=TEXT`, `F=[a,b]`, `F?`, `!F?`. */
export function clause(text) {
  text = text.trim();
  if (/^!?[\w.$]+\?$/.test(text)) {
    const lacks = text.startsWith("!");
    return { field: text.slice(lacks ? 1 : 0, -1), op: "exists", value: !lacks };
  }
  for (const [symbol, op] of operators) {
    const at = text.indexOf(symbol);
    if (at <= 0) continue;
    const field = text.slice(0, at);
    if (!/^[\w.$]+$/.test(field)) continue;
    const rest = text.slice(at + symbol.length);
    if (rest === "") throw new Error(`expected a value after '${symbol}'`);
    if (op === "eq" && rest.startsWith("[") && rest.endsWith("]")) {
      let list;
      try { list = JSON.parse(rest); } catch { list = rest.slice(1, -1).split(","); }
      return { field, op: "in", value: list };
    }
    return { field, op, value: value(rest, op) };
  }
  throw new Error(`not a clause: ${text} (try price<50, name~ann, done=true)`);
}

/** A whole filter, or null for an empty text. */
export function parseFilter(text) {
  const parts = text.split(/\s+and\s+/i).map((p) => p.trim()).filter((p) => p.length);
  if (parts.length === 0) return null;
  const clauses = parts.map(clause);
  return clauses.length === 1 ? clauses[0] : { and: clauses };
}
