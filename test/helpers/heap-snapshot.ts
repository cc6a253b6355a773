/**
 * A V8 heap snapshot (the JSON that --heapsnapshot-signal writes) as a graph to ask questions of:
 * which objects a constructor made, what a property or a closure's variable holds.
 */
interface RawSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

export class HeapGraph {
  private readonly nodeFields: number;
  private readonly edgeFields: number;
  private readonly firstEdge: number[] = [];

  constructor(private readonly raw: RawSnapshot) {
    const { node_fields, edge_fields } = raw.snapshot.meta;
    this.nodeFields = node_fields.length;
    this.edgeFields = edge_fields.length;
    const edgeCount = node_fields.indexOf('edge_count');
    for (let node = 0, edge = 0; node < raw.nodes.length / this.nodeFields; node++) {
      this.firstEdge.push(edge);
      edge += raw.nodes[node * this.nodeFields + edgeCount]! * this.edgeFields;
    }
    this.firstEdge.push(raw.edges.length);
  }

  /** 'object', 'closure', 'string', 'concatenated string', … */
  type(node: number): string {
    return this.raw.snapshot.meta.node_types[0][this.raw.nodes[node * this.nodeFields]!]!;
  }

  /** An object's constructor name, a closure's function name, a string's text. */
  name(node: number): string {
    return this.raw.strings[this.raw.nodes[node * this.nodeFields + 1]!]!;
  }

  nodes(type: string, name: string): number[] {
    const found: number[] = [];
    for (let node = 0; node < this.firstEdge.length - 1; node++) if (this.type(node) === type && this.name(node) === name) found.push(node);
    return found;
  }

  /** The named edges of a node: properties, a closure's context, a context's variables, a cons string's halves. */
  edges(node: number): Map<string, number> {
    const named = new Map<string, number>();
    const types = this.raw.snapshot.meta.edge_types[0];
    for (let edge = this.firstEdge[node]!; edge < this.firstEdge[node + 1]!; edge += this.edgeFields) {
      const type = types[this.raw.edges[edge]!];
      if (type === 'element' || type === 'hidden') continue; // indexed, not named
      named.set(this.raw.strings[this.raw.edges[edge + 1]!]!, this.raw.edges[edge + 2]! / this.nodeFields);
    }
    return named;
  }

  /** The bytes of every object in the snapshot: all that was reachable. */
  totalSize(): number {
    const selfSize = this.raw.snapshot.meta.node_fields.indexOf('self_size');
    let total = 0;
    for (let field = selfSize; field < this.raw.nodes.length; field += this.nodeFields) total += this.raw.nodes[field]!;
    return total;
  }

  /** How many strings a string is made of: 1 if flat, more for a tree of concatenations. */
  stringPieces(node: number): number {
    if (this.type(node) !== 'concatenated string') return 1;
    const halves = this.edges(node);
    return 1 + this.stringPieces(halves.get('first')!) + this.stringPieces(halves.get('second')!);
  }
}
