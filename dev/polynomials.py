"""The float64 exp2 / log2 polynomials of csrc/kernels/cpu/simd.h (Vec<double, VL>).

exp2: 2^f on f in [-1/2, 1/2] (after x = round(x) + f), degree 11.
log2: log2 m = u P(u^2), u = (m - 1) / (m + 1), m in [sqrt(1/2), sqrt(2)), P of degree 7.
Both interpolate at Chebyshev nodes in 50-digit arithmetic (near minimax at these
degrees); printed are the coefficients as doubles (highest degree first, the order of
the Horner steps in simd.h) and the relative error of the rounded polynomial before
the rounding of its evaluation. dev/simd_math_accuracy.cpp measures the compiled
functions (ulp over the whole range, the flush rules).
Run: python dev/polynomials.py  (needs mpmath)
"""
import mpmath as mp

mp.mp.dps = 50


def chebyshev_fit(f, a, b, degree):
    """Monomial coefficients (lowest first) of the interpolant at Chebyshev nodes."""
    n = degree + 1
    xs = [(a + b) / 2 + (b - a) / 2 * mp.cos(mp.pi * (2 * k + 1) / (2 * n)) for k in range(n)]
    c = mp.lu_solve(mp.matrix([[x ** j for j in range(n)] for x in xs]),
                    mp.matrix([f(x) for x in xs]))
    return [c[j] for j in range(n)]


def horner(c, x):
    p = mp.mpf(0)
    for a in reversed(c):
        p = p * x + a
    return p


def report(name, f, a, b, degree, points=2001):
    c = [float(x) for x in chebyshev_fit(f, a, b, degree)]
    exact = [mp.mpf(x) for x in c]
    err = max(abs(horner(exact, x) / f(x) - 1)
              for x in (a + (b - a) * k / (points - 1) for k in range(points)))
    print(f"{name}: degree {degree}, relative error {float(err):.3g}")
    for x in reversed(c):
        print(f"  {x!r}")


u_max = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)


def log2_p(z):
    if z == 0:
        return 2 / mp.log(2)
    s = mp.sqrt(z)
    return 2 / mp.log(2) * mp.atanh(s) / s


if __name__ == "__main__":
    report("exp2", lambda f: mp.power(2, f), mp.mpf(-0.5), mp.mpf(0.5), 11)
    report("log2 P", log2_p, mp.mpf(0), u_max ** 2 * mp.mpf("1.0001"), 7)
