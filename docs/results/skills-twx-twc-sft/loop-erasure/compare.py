import json, sys
from math import comb
def ends(path):
    out={}
    for l in open(path):
        r=json.loads(l)
        if r.get('event')=='end':
            i=int(r['episode_id'].rsplit('-',1)[1]); out[i]=(r['success'], sum(r['subgoals'].values()))
    return out
base=ends('/work/runs/twc/A/skills-sft/repeat-0/evals/20261206-022337-a528/episodes.jsonl')
alone=ends('/work/runs/twc/A/skills-sft/repeat-0/evals/20261206-020525-2266/episodes.jsonl')
new=ends(sys.argv[1])
seeds=sorted(set(base)&set(new))
def mcnemar(b,c):
    n=b+c
    if n==0: return 1.0
    k=min(b,c); return min(1.0, 2*sum(comb(n,i) for i in range(k+1))/2**n)
for name, other in (("memory, plain credit", base), ("adapter alone", alone)):
    w_new=sum(new[s][0] for s in seeds); w_o=sum(other[s][0] for s in seeds)
    b=sum(new[s][0] and not other[s][0] for s in seeds); c=sum(other[s][0] and not new[s][0] for s in seeds)
    p3n=sum(new[s][1]>=3 for s in seeds); p3o=sum(other[s][1]>=3 for s in seeds)
    print(f"{len(seeds)} seeds: loop-erased {w_new} wins vs {name} {w_o} ({b}:{c}, p={mcnemar(b,c):.3g}); point 3 reached {p3n} vs {p3o}")
