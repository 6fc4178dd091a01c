"""Development-time fit of the tables in erf_tables.rs (not run by the build).

python3 erf_tables_fit.py gelu 7   # GELU_M: M(a) = Phi(-a) e^(a^2/2), a = k + t, |t| <= 1/2
python3 erf_tables_fit.py erf 5    # (retired ERF_T) erf(0.875 + k/4 + w/4), |w| <= 1/2
python3 erf_tables_fit.py phi 7    # GELU_PHI: Phi(0.625 (k - 6) + t), |t| <= 0.3125
python3 erf_tables_fit.py erfd 6   # ERF_D: erf(0.3125 k + t), |t| <= 0.15625 (k = 0: t >= 0, erf(0) = 0)
python3 erf_tables_fit.py dgelu 7  # GELU_D: GELU'(0.8125 (k - 8) + t), |t| <= 0.40625

Per interval: the coefficients from the constant term up, each rounded to f32 and the
higher ones refitted to the remainder (least squares on Chebyshev points, Lawson
reweighting toward minimax), weighted by 1/|M| or 1/Phi (GELU: relative error) or uniformly
(erf: absolute error, erf in [0.71, 1]), GELU' = Phi + x phi by 1/max(|GELU'|, 1/2) (absolute
below 1/2: GELU' crosses zero at x = -0.7518, and its Gaussian tail below x = -3 is smaller
than the rounding of the sum the f32 Horner steps form). Prints the worst error of the f32-coefficient
polynomials (exact evaluation) on stderr, in units of 2^-24 relative (GELU) or absolute
(erf), and one Python list per power of t on stdout, the sixteen intervals in order.
"""
import math, struct, sys
def f32(x): return struct.unpack('f', struct.pack('f', x))[0]
def Phi(x): return 0.5*math.erfc(-x/math.sqrt(2))
def dgelu(x): return Phi(x) + x*math.exp(-x*x/2)/math.sqrt(2*math.pi)
def M(a): return 0.5*math.erfc(a/math.sqrt(2))*math.exp(a*a/2)
def solve(A, b):
    n=len(b); A=[r[:]+[b[i]] for i,r in enumerate(A)]
    for i in range(n):
        p=max(range(i,n),key=lambda r:abs(A[r][i])); A[i],A[p]=A[p],A[i]
        for r in range(i+1,n):
            f=A[r][i]/A[i][i]
            for c in range(i,n+1): A[r][c]-=f*A[i][c]
    x=[0]*n
    for i in reversed(range(n)):
        x[i]=(A[i][n]-sum(A[i][c]*x[c] for c in range(i+1,n)))/A[i][i]
    return x
def lsq(ts, ys, ws, degs):
    # minimize sum w^2 (sum_k c_k t^k - y)^2 over k in degs
    n=len(degs)
    A=[[0.0]*n for _ in range(n)]; b=[0.0]*n
    for t,y,w in zip(ts,ys,ws):
        row=[t**k for k in degs]
        for i in range(n):
            b[i]+=w*w*row[i]*y
            for j in range(n): A[i][j]+=w*w*row[i]*row[j]
    return solve(A,b)
def fit(f, lo, hi, d, wfun, npts=400, iters=6):
    ts=[lo+(hi-lo)*(0.5-0.5*math.cos(math.pi*(i+0.5)/npts)) for i in range(npts)]
    ys=[f(t) for t in ts]
    base=[1.0/wfun(t,y) for t,y in zip(ts,ys)]
    coef=[]
    for k in range(d+1):
        degs=list(range(k,d+1))
        rem=[y-sum(c*t**j for j,c in enumerate(coef)) for t,y in zip(ts,ys)]
        ws=base[:]
        for it in range(iters):  # Lawson reweighting toward minimax
            c=lsq(ts,rem,ws,degs)
            errs=[abs(sum(cc*t**j for cc,j in zip(c,degs))-r)*b for t,r,b in zip(ts,rem,base)]
            m=max(errs)
            ws=[w*math.sqrt(max(e/m,1e-3)) for w,e in zip(ws,errs)]
        coef.append(f32(c[0]))
    # error with f32 coefficients (exact arithmetic)
    e=0
    for i in range(2001):
        t=lo+(hi-lo)*i/2000
        y=f(t); p=0.0
        for c in reversed(coef): p=p*t+c
        e=max(e,abs(p-y)/wfun(t,y))
    return coef,e
kind=sys.argv[1]; d=int(sys.argv[2])
if kind=='gelu':
    tab=[];worst=0
    for k in range(16):
        lo=0.0 if k==0 else -0.5
        hi=0.5 if k<15 else 0.5
        c,e=fit(lambda t:M(k+t), lo, hi, d, lambda t,y: abs(y)*2**-24)
        tab.append(c); worst=max(worst,e); print(k, 'err ulp(2^-24 rel)', e, file=sys.stderr)
    print('worst', worst, file=sys.stderr)
elif kind=='phi':
    tab=[];worst=0
    for k in range(16):
        c0=0.625*(k-6)
        c,e=fit(lambda t:Phi(c0+t), -0.3125, 0.3125, d, lambda t,y: abs(y)*2**-24)
        tab.append(c); worst=max(worst,e); print(k, 'err ulp(2^-24 rel)', e, file=sys.stderr)
    print('worst', worst, file=sys.stderr)
elif kind=='dgelu':
    tab=[];worst=0
    for k in range(16):
        c0=0.8125*(k-8)
        # the interval choice round(c*16/13) may round either way within an ulp of an edge
        h=0.40625*1.0005
        c,e=fit(lambda t:dgelu(c0+t), -h, h, d, lambda t,y: max(abs(y),0.5)*2**-24)
        tab.append(c); worst=max(worst,e); print(k, 'err (2^-24 max(|y|,1/2))', e, file=sys.stderr)
    print('worst', worst, file=sys.stderr)
elif kind=='erfd':
    tab=[];worst=0
    for k in range(16):
        c0=0.3125*k
        if k==0:
            # odd: erf(t) = t*(E + c3 t^2 + c5 t^4), E = 2/sqrt(pi) as f32 hi + lo (the lo
            # row, zero elsewhere), c3, c5 fitted to erf(t)/t - E in relative error
            E=2/math.sqrt(math.pi); hi=f32(E); lo=f32(E-hi)
            ts=[0.15625*(0.5-0.5*math.cos(math.pi*(i+0.5)/400)) for i in range(400)]
            ys=[math.erf(t)/t-E for t in ts]; coef=[]
            for r in range(2,d,2):
                degs=list(range(r,d,2))
                rem=[y-sum(c*t**j for j,c in zip(range(2,d,2),coef)) for t,y in zip(ts,ys)]
                ws=[1.0]*400
                for it in range(6):
                    c=lsq(ts,rem,ws,degs)
                    errs=[abs(sum(cc*t**j for cc,j in zip(c,degs))-rr) for t,rr in zip(ts,rem)]
                    m=max(errs); ws=[w*math.sqrt(max(e/m,1e-3)) for w,e in zip(ws,errs)]
                coef.append(f32(c[0]))
            full=[0.0]*(d+1); full[1]=hi
            for i,cc in enumerate(coef): full[2*i+3]=cc
            e=0
            for i in range(1,2001):
                t=0.15625*i/2000; p=0.0
                for cc in reversed(full[2:]): p=p*t+cc
                p=(hi+lo)*t+p*t*t*t if False else t*(hi+lo+t*t*(full[3]+t*t*full[5]))
                e=max(e,abs(p-math.erf(t))/(math.erf(t)*2**-24))
            c=full; lo0=lo
        else:
            c,e=fit(lambda t:math.erf(c0+t), -0.15625, 0.15625, d, lambda t,y: abs(y)*2**-24)
        tab.append(c); worst=max(worst,e); print(k,'err ulp(2^-24 rel)', e, file=sys.stderr)
    print('worst', worst, file=sys.stderr)
else:
    tab=[];worst=0
    for k in range(16):
        c0=0.75+0.25*k+0.125
        c,e=fit(lambda t:math.erf(c0+t/4), -0.5, 0.5, d, lambda t,y: 2**-24)
        tab.append(c); worst=max(worst,e); print(k,'err ulp', e, file=sys.stderr)
    print('worst', worst, file=sys.stderr)
for j in range(d+1):
    print([repr(tab[k][j]) for k in range(16)])
if kind=='erfd':
    print([repr(lo0)]+['0.0']*15)  # the lo row: t's low coefficient, interval 0 only
