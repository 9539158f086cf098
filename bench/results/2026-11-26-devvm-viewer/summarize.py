# Medians over the runs of each build of each run's median (wall, p90, CPU and UI ms per frame; the load):
# summarize.py LOG...
import sys,re,statistics
runs={'before':[], 'after':[]}
cur=None
for line in (l for path in sys.argv[1:] for l in open(path)):
    m=re.match(r'=== (\w+) run',line)
    if m: cur={'_':line.strip()}; runs[m.group(1)].append(cur); continue
    if cur is None: continue
    if line.startswith('load_run'):
        p=line.split(); cur['load']=(float(p[5]),float(p[7]))  # median s, CPU s
    for name in ['timeline, zoomed out','timeline, 10 ms','timeline, zoomed in','memory','kernels']:
        if line.startswith(name):
            nums=re.findall(r'[\d.]+',line[34:])
            cur[name]=tuple(float(x) for x in nums[:5])  # median p90 max cpu ui
for k in ['before','after']:
    rs=[r for r in runs[k] if 'kernels' in r]
    print(k, len(rs),'runs')
    if not rs: continue
    print('  load median s %.2f cpu %.2f'%(statistics.median(r['load'][0] for r in rs), statistics.median(r['load'][1] for r in rs)))
    for name in ['timeline, zoomed out','timeline, 10 ms','timeline, zoomed in','memory','kernels']:
        v=[r[name] for r in rs]
        print('  %-22s wall %6.2f p90 %6.2f cpu %6.2f ui %5.2f'%(name, statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), statistics.median(x[3] for x in v), statistics.median(x[4] for x in v)))
